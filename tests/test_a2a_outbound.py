"""A Butler delegating to standard A2A agents: an a2a-sdk server (every interface it can
pick, streaming or polling, task or message replies) and a Butler reached over A2A."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from google.protobuf.json_format import MessageToDict

from butler.identity.receipts import receipt_claims
from tests.delegation_support import butler_with_peer
from tests.sdk03_support import sdk03_agent
from tests.sdk_agent import sdk_agent
from tests.support import Swarm, config_dict, new_pair, post_task, start_instance

URI = "urn:butler:a2a:ext:swarm:v1"


NEEDS_GRPC = pytest.mark.skipif(importlib.util.find_spec("grpc") is None,
                                reason="gRPC needs the grpc extra (pip install 'butler-a2a[grpc]')")


@pytest.mark.parametrize(("binding", "version", "streaming"), [
    ("JSONRPC", "1.0", True), ("JSONRPC", "1.0", False), ("HTTP+JSON", "1.0", True),
    ("HTTP+JSON", "1.0", False), ("JSONRPC", "0.3", True), ("JSONRPC", "0.3", False),
    pytest.param("GRPC", "1.0", True, marks=NEEDS_GRPC),
    pytest.param("GRPC", "1.0", False, marks=NEEDS_GRPC),
])
async def test_delegate_to_an_sdk_agent(swarm: Swarm, binding: str, version: str,
                                        streaming: bool) -> None:
    token, _ = new_pair()
    async with sdk_agent(token, binding=binding, version=version, streaming=streaming) as agent:
        home = await butler_with_peer(swarm, agent.url, token, cost_usd="0.10")
        status, task = await post_task(home, {"task": "hello there",
                                              "capabilities_needed": ["shout"]})
        assert status == 200 and task["state"] == "completed", task
        assert task["output"] == "HELLO THERE"
        assert task["budget"]["spent_usd"] == "0.10"
        assert task["cost"]["children"][0]["agent"] == "shouter"
        message = agent.seen.messages[0]
        envelope = MessageToDict(message.metadata)[URI]
        assert list(envelope["callerChain"]) == ["operator", "home"]
        assert envelope["budgetUsd"] == "5.00" and envelope["depth"] == 2
        assert envelope["traceId"] == task["swarm"]["trace_id"]
        sent = [h for h in agent.seen.headers if h.get("x-swarm-agent-chain")]
        assert sent and sent[0]["x-swarm-agent-chain"] == "operator,home"
        assert sent[0]["a2a-version"] == version and sent[0]["a2a-extensions"] == URI
        assert sent[0]["authorization"] == f"Bearer {token}"
        assert task["swarm"]["trace_id"] in sent[0]["traceparent"]


async def test_message_only_reply_and_a_failing_agent(swarm: Swarm) -> None:
    token, _ = new_pair()
    async with sdk_agent(token, reply="message", streaming=False) as agent:
        home = await butler_with_peer(swarm, agent.url, token)
        _, task = await post_task(home, {"task": "hi", "capabilities_needed": ["shout"]})
        assert task["state"] == "completed" and task["output"] == "HI"
    await swarm.stop(home)
    async with sdk_agent(token, reply="fail") as agent:
        home = await butler_with_peer(swarm, agent.url, token)
        _, task = await post_task(home, {"task": "hi", "capabilities_needed": ["shout"]})
        assert task["state"] == "failed" and task["error"]["code"] == "peer_error"
        assert "cannot shout that" in task["error"]["message"]


async def test_a_wrong_token_or_no_agent_fails_cleanly(swarm: Swarm) -> None:
    token, _ = new_pair()
    async with sdk_agent(token) as agent:
        home = await butler_with_peer(swarm, agent.url, "not-the-token")
        _, task = await post_task(home, {"task": "hi", "capabilities_needed": ["shout"]})
        assert task["state"] == "failed" and task["error"]["code"] == "peer_error"
    await swarm.stop(home)
    home = await butler_with_peer(swarm, agent.url, token, connect_timeout_seconds=1)
    _, task = await post_task(home, {"task": "hi", "capabilities_needed": ["shout"]})
    assert task["state"] == "failed" and task["error"]["code"] == "peer_unreachable"


async def test_a_butler_over_a2a_keeps_its_refusals(swarm: Swarm, tmp_path: Path,
                                                     http: aiohttp.ClientSession) -> None:
    office = await swarm.start(
        "office", callers={"home": {}}, swarm={"max_depth": 1},
        skills=[{"id": "shout", "builtin": "echo", "capabilities": ["shout"], "expose": True}])
    token_file = tmp_path / "home-to-office.token"
    token_file.write_text(office.tokens["home"])
    cfg, tokens = config_dict(tmp_path, "home", callers={"operator": {"bound": False}}, peers=[{
        "name": "office", "url": office.url, "token_file": str(token_file), "protocol": "a2a",
        "capabilities": ["shout"]}])
    home = await start_instance(tmp_path, http, cfg, tokens)
    swarm.instances.append(home)
    _, task = await post_task(home, {"task": "hi", "capabilities_needed": ["shout"]})
    assert task["state"] == "completed" and task["output"] == "hi"
    assert task["cost"]["children"][0]["agent"] == "office"
    # The office's signed receipt came back in the A2A task's metadata (docs/receipts.md).
    assert [receipt_claims(r)["agent"] for r in task["receipts"]] == ["home", "office"]
    # With one hop already in the chain, office (max_depth 1) refuses: final, not retried.
    _, task = await post_task(home, {"task": "hi", "capabilities_needed": ["shout"],
                                     "caller_chain": ["origin"]})
    assert task["state"] == "failed" and task["error"]["code"] == "depth_exceeded", task
    assert "office" in task["error"]["message"]


@pytest.mark.parametrize(("mode", "card"), [
    ("updater", "new"),  # the stream begins with a status-update (0.3 allows it)
    ("task", "new"),
    ("task", "old"),     # only /.well-known/agent.json, the older card path
])
async def test_delegate_to_an_a2a_sdk_0_3_agent(swarm: Swarm, sdk03: Path, mode: str,
                                                card: str) -> None:
    token, _ = new_pair()
    async with sdk03_agent(sdk03, token, mode=mode, card=card) as url:
        home = await butler_with_peer(swarm, url, token)
        status, task = await post_task(home, {"task": "hello there",
                                              "capabilities_needed": ["shout"]})
        assert status == 200 and task["state"] == "completed", task.get("error")
        assert task["output"] == "HELLO THERE"


async def test_an_unusable_stream_falls_back_to_a_plain_send(swarm: Swarm) -> None:
    """A 0.3 agent whose stream begins with something no reader can use: the message
    goes again, without streaming, and that answer is taken."""
    token, _ = new_pair()
    sends: list[str] = []
    card_reads: list[str | None] = []

    async def card(request: web.Request) -> web.Response:
        card_reads.append(request.headers.get("Authorization"))
        base = f"http://127.0.0.1:{request.url.port}"
        return web.json_response({
            "name": "odd", "description": "odd", "url": base + "/rpc", "version": "1",
            "protocolVersion": "0.3.0", "preferredTransport": "JSONRPC",
            "capabilities": {"streaming": True}, "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"], "skills": []})

    async def rpc(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        sends.append(body["method"])
        if body["method"] == "message/stream":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b'data: {"jsonrpc": "2.0", "id": 1, "result": {"kind": "odd"}}\n\n')
            return resp
        text = body["params"]["message"]["parts"][0]["text"]
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {
            "kind": "task", "id": "t1", "contextId": "c1",
            "status": {"state": "completed"},
            "artifacts": [{"artifactId": "a", "parts": [{"kind": "text", "text": text[::-1]}]}]}})

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    app.router.add_post("/rpc", rpc)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        home = await butler_with_peer(swarm, f"http://127.0.0.1:{port}", token)
        _, task = await post_task(home, {"task": "abc", "capabilities_needed": ["shout"]})
    finally:
        await runner.cleanup()
    assert sends == ["message/stream", "message/send"]
    assert task["state"] == "completed" and task["output"] == "cba", task.get("error")
    # The card is read once, without the token (key continuity), and that very card says
    # where the task goes.
    assert card_reads == [None]
