"""Delegation to an agent built with the official JavaScript SDK, @a2a-js/sdk 1.3 (issue 34,
7): a Node subprocess (tests/js_agent/agent.mjs) that a Butler reaches on A2A 1.0 JSON-RPC.
Its question reaches the Butler's caller and the answer goes back to its task; a cancel at
the Butler cancels its task; its streamed progress reaches a caller streaming from the
Butler."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from a2a.types import TaskState
from aiohttp import web

from tests.a2a_support import sdk_client, send_request, text, user_message
from tests.audit_support import audit_records
from tests.delegation_support import a2a_card, butler_with_peer, following, serving
from tests.js_support import JsAgent, js_agent
from tests.support import Instance, Swarm, call, new_pair, post_task, wait_until

NEEDS_NODE = pytest.mark.usefixtures("js_sdk")  # Node with the SDK, or a skip

SHOUT = {"task": "hello", "capabilities_needed": ["shout"]}


async def answer(home: Instance, task_id: str, words: str, **extra: Any) -> dict[str, Any]:
    status, body = await call(home, "POST", f"/v2/tasks/{task_id}/input",
                              body={"task": words, **extra})
    assert status == 200 and isinstance(body, dict), body
    return body


async def cancel_reaches(swarm: Swarm, home: Instance, task_id: str, agent: JsAgent,
                         peer_task: str) -> None:
    """Home's task canceled: the agent receives exactly one cancel, for ``peer_task``,
    which ends canceled, and home's audit trail records the agent's answer."""
    status, canceled = await call(home, "POST", f"/v2/tasks/{task_id}/cancel")
    assert status == 200 and canceled["state"] == "canceled", canceled

    async def canceled_there() -> bool:
        return await agent.state(peer_task) == "TASK_STATE_CANCELED"

    await wait_until(canceled_there, what="the JS agent's task canceled")
    await swarm.stop(home)  # waits for the cancel's answer, within its bound
    assert (await agent.seen())["cancels"] == [peer_task]
    (record,) = await audit_records(home.daemon, "delegation_canceled")
    assert record.decision == "canceled" and record.detail["binding"] == "JSONRPC", record
    assert record.detail["peer_task_id"] == peer_task


@NEEDS_NODE
async def test_the_js_agents_question_is_answered_by_the_butlers_caller(
        swarm: Swarm, http: aiohttp.ClientSession) -> None:
    token, _ = new_pair()
    async with js_agent(http, token, mode="ask") as agent:
        home = await butler_with_peer(swarm, agent.url, token, cost_usd="0.10")
        status, task = await post_task(home, SHOUT)
        assert status == 200 and task["state"] == "input-required", task
        assert task["status"]["message"] == "how loud?"
        assert task["status"]["asked_by"] == "shouter"

        done = await answer(home, task["id"], "very loud")
        assert done["state"] == "completed" and done["output"] == "VERY LOUD", done
        assert done["budget"]["spent_usd"] == "0.10"
        first, second = (await agent.seen())["messages"]
        assert first["text"] == "hello" and second["text"] == "very loud"
        # The answer went to the agent's own task, in its context, which then completed.
        assert second["taskId"] and second["contextId"] == first["contextId"]
        assert await agent.state(second["taskId"]) == "TASK_STATE_COMPLETED"


@NEEDS_NODE
async def test_a_cancel_at_the_butler_cancels_the_js_agents_task(
        swarm: Swarm, http: aiohttp.ClientSession) -> None:
    token, _ = new_pair()
    async with js_agent(http, token, mode="wait") as agent:
        home = await butler_with_peer(swarm, agent.url, token)
        _, task = await post_task(home, {**SHOUT, "mode": "async"})

        async def working() -> list[str] | None:
            return (await agent.seen())["working"] or None

        (peer_task,) = await wait_until(working, what="the JS agent works")
        await wait_until(lambda: following(home), what="home follows the agent's task")
        await cancel_reaches(swarm, home, task["id"], agent, peer_task)


@NEEDS_NODE
async def test_a_cancel_while_the_js_agent_asks_cancels_its_task(
        swarm: Swarm, http: aiohttp.ClientSession) -> None:
    token, _ = new_pair()
    async with js_agent(http, token, mode="ask") as agent:
        home = await butler_with_peer(swarm, agent.url, token)
        _, task = await post_task(home, SHOUT)
        assert task["state"] == "input-required", task
        (asked,) = (await agent.seen())["messages"]
        await cancel_reaches(swarm, home, task["id"], agent, asked["taskId"])


@NEEDS_NODE
async def test_the_js_agents_progress_reaches_a_streaming_caller(
        swarm: Swarm, http: aiohttp.ClientSession) -> None:
    """The caller streams from the Butler (A2A ``SendStreamingMessage``, the official
    Python client); the agent's own status and artifact updates come through, marked with
    the peer they came from, before the end."""
    token, _ = new_pair()
    async with js_agent(http, token) as agent:
        home = await butler_with_peer(swarm, agent.url, token)
        async with sdk_client(home, streaming=True) as client:
            # A2A carries no capabilities: the Butler routes the words to the peer.
            message = user_message(text("shout hello"))
            events = [e async for e in client.send_message(send_request(message))]
    updates = [e.status_update.status for e in events if e.HasField("status_update")]
    said = [(s.state, "".join(p.text for p in s.message.parts)) for s in updates]
    assert (TaskState.TASK_STATE_WORKING, "[shouter] shouting") in said, said
    chunks = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert chunks and chunks[0].parts[0].text == "SHOUT HELLO", chunks
    last = events[-1]
    final = last.status_update.status if last.HasField("status_update") else last.task.status
    assert final.state == TaskState.TASK_STATE_COMPLETED, events


@NEEDS_NODE
async def test_the_js_agents_work_after_the_answer_reaches_a_follower(
        swarm: Swarm, http: aiohttp.ClientSession) -> None:
    """A caller following the waiting task on /v2 (SSE) sees the agent's work that its
    answer set going, as the agent streams it."""
    token, _ = new_pair()
    async with js_agent(http, token, mode="ask") as agent:
        home = await butler_with_peer(swarm, agent.url, token)
        _, task = await post_task(home, SHOUT)
        assert task["state"] == "input-required", task
        seen: list[tuple[str, dict[str, Any]]] = []
        async for kind, data in home.client().events(task["id"]):
            seen.append((kind, data))
            if len(seen) == 1:  # following the task: now the answer
                await answer(home, task["id"], "soft", mode="async")
    states = [(d["state"], d["status"]["message"]) for k, d in seen if k == "status"]
    assert ("working", "[shouter] shouting") in states, states
    chunks = [d["artifact"] for k, d in seen if k == "artifact"]
    assert chunks and chunks[0]["parts"][0]["text"] == "SOFT" and chunks[0]["source"] == "shouter"
    assert seen[-1][1]["state"] == "completed" and seen[-1][1]["output"] == "SOFT"


async def test_an_answers_stream_that_begins_with_the_question_goes_on(swarm: Swarm) -> None:
    """What @a2a-js/sdk 1.3 streams on an answer, without Node: the server begins every
    turn with the task, here still asking "how loud?"; the turn's outcome is what follows."""
    def event(result: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode() \
            + b"\n\n"

    def status(state: str, words: str = "") -> dict[str, Any]:
        parts = [{"text": words}] if words else []
        return {"state": state, "message": {"messageId": words, "role": "ROLE_AGENT",
                                            "parts": parts}}

    asking = {"id": "t1", "contextId": "c1", "status": status("TASK_STATE_INPUT_REQUIRED",
                                                              "how loud?")}

    async def card(request: web.Request) -> web.Response:
        return web.json_response(a2a_card(f"http://127.0.0.1:{request.url.port}/rpc",
                                          streaming=True))

    async def rpc(request: web.Request) -> web.StreamResponse:
        message = (await request.json())["params"]["message"]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(event({"task": asking}))
        if message.get("taskId") == "t1":  # the answer: the work, then the end
            update = {"taskId": "t1", "contextId": "c1"}
            await resp.write(event({"statusUpdate": {**update, "status": status(
                "TASK_STATE_WORKING", "shouting")}}))
            await resp.write(event({"artifactUpdate": {**update, "artifact": {
                "artifactId": "a", "parts": [{"text": message["parts"][0]["text"].upper()}]}}}))
            await resp.write(event({"statusUpdate": {**update, "status": status(
                "TASK_STATE_COMPLETED")}}))
        return resp

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    app.router.add_post("/rpc", rpc)
    async with serving(app) as url:
        home = await butler_with_peer(swarm, url, new_pair()[0])
        _, task = await post_task(home, SHOUT)
        assert task["state"] == "input-required" and task["status"]["message"] == "how loud?"
        done = await answer(home, task["id"], "soft")
        assert done["state"] == "completed" and done["output"] == "SOFT", done
