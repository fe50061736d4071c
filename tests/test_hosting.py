"""Several agents in one daemon: each under /{id}/ with its own card, key, tokens, tasks
and swarm limits; delegation between them under the swarm rules; each its own registry entry."""

from __future__ import annotations

import socket
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
from a2a.types import TaskState as TaskState_pb
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from yarl import URL

from butler.config import load_config
from butler.config.model import Config
from butler.daemon import Daemon
from internal.protocol.a2a.codec.card_signature import verify_card
from internal.protocol.a2a.model import TaskRequest, TaskState
from tests.a2a_support import (
    JSONRPC,
    V1,
    plain_message,
    rpc,
    sdk_client,
    send_request,
    text,
    user_message,
)
from tests.delegation_support import free_port, skill
from tests.hosting_support import get_json, hosted, hosted_entry, peer_to
from tests.registry.registry_support import TOKENS, sqlite_registry
from tests.support import (
    Instance,
    Swarm,
    config_dict,
    post_task,
    run_cli,
    write_config,
)


async def test_each_agent_serves_its_own_signed_card_and_takes_tasks(swarm: Swarm) -> None:
    alpha, alpha_tokens = hosted_entry("alpha")
    beta, beta_tokens = hosted_entry("beta", description="the second one")
    top = await swarm.start("top", extra={"agents": [alpha, beta]})
    agents = {"alpha": hosted(top, "alpha", alpha_tokens),
              "beta": hosted(top, "beta", beta_tokens)}
    kids = {top.daemon.identity.kid}
    for agent_id, inst in agents.items():
        status, card = await get_json(top.session, f"{inst.url}/.well-known/agent-card.json",
                                      headers=V1)
        assert status == 200 and card["name"] == f"{agent_id} agent"
        assert {i["url"] for i in card["supportedInterfaces"]} == {
            f"{top.url}/{agent_id}", f"{top.url}/{agent_id}{JSONRPC}"}
        assert verify_card(card).kid == inst.daemon.identity.kid
        kids.add(inst.daemon.identity.kid)
        assert inst.daemon.config.data_dir == top.daemon.config.data_dir / "agents" / agent_id
        for streaming in (False, True):  # a stream leaves the daemon's in-flight count too
            async with sdk_client(inst, streaming=streaming) as client:
                events = [e async for e in client.send_message(send_request(user_message(
                    text("hello"), metadata={"skill": "echo"})))]
            last = events[-1]
            state = last.task.status.state if last.HasField("task") else \
                last.status_update.status.state
            assert state == TaskState_pb.TASK_STATE_COMPLETED, events
    assert len(kids) == 3  # each agent its own key
    status, card = await get_json(top.session, f"{top.url}/.well-known/agent-card.json",
                                  headers=V1)
    assert status == 200 and card["name"] == "top butler"  # the daemon's own agent, as before


async def test_tokens_are_per_agent_and_an_unknown_agent_is_404(swarm: Swarm) -> None:
    alpha, alpha_tokens = hosted_entry("alpha")
    beta, beta_tokens = hosted_entry("beta")
    top = await swarm.start("top", extra={"agents": [alpha, beta]})
    http = top.session
    task = {"task": "hi", "skill": "echo"}
    for url, token, expected in (
            (f"{top.url}/alpha", alpha_tokens["operator"], 200),
            (f"{top.url}/beta", alpha_tokens["operator"], 401),
            (top.url, alpha_tokens["operator"], 401),
            (f"{top.url}/alpha", top.tokens["operator"], 401),
            (f"{top.url}/alpha", beta_tokens["operator"], 401)):
        async with http.post(f"{url}/v2/tasks", json=task,
                             headers={"Authorization": f"Bearer {token}"}) as resp:
            assert resp.status == expected, (url, expected)
    auth = {"Authorization": f"Bearer {top.tokens['operator']}", **V1}
    async with http.post(f"{top.url}/nobody{JSONRPC}", headers=auth, json={
            "jsonrpc": "2.0", "id": 7, "method": "SendMessage",
            "params": {"message": plain_message()}}) as resp:
        body = await resp.json()
        assert resp.status == 404 and body["jsonrpc"] == "2.0" and "error" in body
    async with http.get(f"{top.url}/nobody/tasks/x", headers=auth) as resp:
        body = await resp.json()
        assert resp.status == 404 and body["error"]["status"] == "NOT_FOUND"
    for path in ("/nobody/.well-known/agent-card.json", "/nobody/v2/tasks"):
        status, body = await get_json(http, top.url + path, top.tokens["operator"])
        assert status == 404 and body["error"]["code"] == "not_found", path
    # Without a token, a route that needs one says 401 first, as at the daemon's own /.
    status, _ = await get_json(http, f"{top.url}/nobody/.well-known/agent-card.json")
    assert status == 404
    status, _ = await get_json(http, f"{top.url}/nobody/v2/tasks")
    assert status == 401
    async with http.head(f"{top.url}/alpha/.well-known/agent-card.json") as resp:
        assert resp.status == 200
    # An agent's id spelled with %-escapes is that agent.
    async with http.get(URL(f"{top.url}/%61lpha/v2/card", encoded=True), headers={
            "Authorization": f"Bearer {alpha_tokens['operator']}"}) as resp:
        assert resp.status == 200 and (await resp.json())["agent_id"] == "alpha"
    # The daemon's own routes keep their answers: a wrong method is still 405.
    async with http.delete(f"{top.url}/tasks/x", headers=auth) as resp:
        assert resp.status == 405


async def test_cohosted_agents_delegate_under_the_swarm_rules(tmp_path: Path,
                                                               swarm: Swarm) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    alpha, alpha_tokens = hosted_entry("alpha", callers={"operator": {}, "beta": {}},
                                       skills=[])
    beta, beta_tokens = hosted_entry("beta", callers={"operator": {}, "alpha": {}},
                                     skills=[skill("x.echo", "0.25")],
                                     swarm={"max_depth": 3})
    alpha["peers"] = [peer_to(tmp_path, f"{base}/beta", beta_tokens["alpha"], "beta",
                              ["x.echo", "x.loop"])]
    # beta knows alpha under another name: only alpha's own admission can see the loop.
    beta["peers"] = [peer_to(tmp_path, f"{base}/alpha", alpha_tokens["beta"], "helper",
                             ["x.loop"])]
    spans = InMemorySpanExporter()
    top = await swarm.start("top", configurations={"a2a": {"port": port}},
                            extra={"agents": [alpha, beta]},
                            daemon_kwargs={"span_exporter": spans})
    client = hosted(top, "alpha", alpha_tokens).client()

    done = await client.submit(TaskRequest(text="go", capabilities_needed=("x.echo",)))
    assert done.state is TaskState.COMPLETED, done.error
    assert done.cost is not None and [c.agent for c in done.cost.children] == ["beta"]
    assert done.budget is not None and done.budget.spent_usd == Decimal("0.25")
    # One trace across the hop, each agent a service of its own in it.
    tasks = {s.resource.attributes["service.name"]: s for s in spans.get_finished_spans()
             if s.name == "butler.task" and s.context is not None
             and format(s.context.trace_id, "032x") == done.trace_id}
    assert set(tasks) == {"butler-alpha", "butler-beta"}
    beta_attributes = tasks["butler-beta"].attributes
    assert beta_attributes is not None and list(
        beta_attributes["butler.caller_chain"]) == ["operator", "alpha"]  # type: ignore[arg-type]

    # Signed by each agent's own key, checked against each one's card at its own URL.
    alpha_inst = hosted(top, "alpha", alpha_tokens)
    code, out, err = await run_cli("receipt", "verify", alpha_inst.url, done.id,
                                   token=alpha_tokens["operator"])
    assert code == 0, err
    assert out.splitlines()[0] == f"receipts of task {done.id}: 2 verified"

    loop = await client.submit(TaskRequest(text="go", capabilities_needed=("x.loop",)))
    assert loop.state is TaskState.FAILED
    assert loop.error is not None and loop.error.code == "loop_detected"

    status, poor = await post_task(hosted(top, "alpha", alpha_tokens), {
        "task": "x", "capabilities_needed": ["x.echo"], "budget": "0.10"})
    assert poor["state"] == "failed" and poor["error"]["code"] == "budget_exhausted"
    assert poor["budget"]["spent_usd"] == "0"
    # beta's own swarm limits, not the daemon's: a chain deeper than its max_depth.
    status, deep = await post_task(hosted(top, "beta", beta_tokens), {
        "task": "x", "skill": "x.echo", "caller_chain": ["a", "b", "c", "operator"]})
    assert status == 422 and deep["error"]["code"] == "depth_exceeded"


async def test_each_agent_is_its_own_registry_entry(tmp_path: Path, swarm: Swarm) -> None:
    async with sqlite_registry(tmp_path) as registry:
        (tmp_path / "alice.token").write_text(TOKENS["alice"])
        announce = {"self_register": True, "url": registry.url, "health_ttl_minutes": 1,
                    "token_file": str(tmp_path / "alice.token")}
        alpha, _ = hosted_entry("alpha", skills=[skill("alpha.work")])
        beta, _ = hosted_entry("beta", skills=[skill("beta.work")])
        quiet, _ = hosted_entry("quiet", registry={"self_register": False})
        top = await swarm.start("top", callers={"operator": {}, "root": {"tier": "admin"}},
                                configurations={"registry": announce},
                                extra={"agents": [alpha, beta, quiet]})
        listed = await registry_agents(top.session, registry.url)
        assert {a["name"]: a["url"] for a in listed} == {
            "top": top.url, "alpha": f"{top.url}/alpha", "beta": f"{top.url}/beta"}
        keys = {a["name"]: a["card"]["identity_key"] for a in listed}
        assert keys["alpha"] == hosted(top, "alpha", {}).daemon.identity.key.public.jwk
        assert len({str(k) for k in keys.values()}) == 3  # each its own key
        gamma, _ = hosted_entry("gamma")
        async with top.session.post(f"{top.url}/v2/admin/agents", json=gamma,
                                    headers=top.headers("root")) as resp:
            assert resp.status == 201
        assert "gamma" in {a["name"] for a in await registry_agents(top.session, registry.url)}
        async with top.session.delete(f"{top.url}/v2/admin/agents/gamma",
                                      headers=top.headers("root")) as resp:
            assert resp.status == 200
        assert {a["name"] for a in await registry_agents(top.session, registry.url)} == {
            "top", "alpha", "beta"}
        await swarm.close()


async def registry_agents(http: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    async with http.get(f"{url}/v1/agents",
                        headers={"Authorization": f"Bearer {TOKENS['root']}"}) as resp:
        assert resp.status == 200
        agents: list[dict[str, Any]] = (await resp.json())["agents"]
        return agents


async def test_the_tenant_field_names_the_agent_at_the_url(swarm: Swarm) -> None:
    alpha, alpha_tokens = hosted_entry("alpha")
    top = await swarm.start("top", extra={"agents": [alpha]})
    inst = hosted(top, "alpha", alpha_tokens)

    async def send(at: Instance, tenant: object) -> tuple[int, Any]:
        params = {"message": plain_message(metadata={"skill": "echo"}), "tenant": tenant}
        return await rpc(at, "SendMessage", params)

    for tenant in ("alpha", ""):
        status, body = await send(inst, tenant)
        assert status == 200 and body["result"]["task"]["status"]["state"] == \
            "TASK_STATE_COMPLETED", body
    wrong: tuple[tuple[Instance, object], ...] = ((inst, "beta"), (top, "alpha"), (inst, 7))
    for at, other in wrong:
        status, body = await send(at, other)
        assert status == 200 and "error" in body and "result" not in body, (other, body)
    async with top.session.post(f"{inst.url}/message:send", headers={
            **inst.headers(), **V1}, json={"message": plain_message(), "tenant": "top"}) as resp:
        assert resp.status == 404


async def test_the_port_takes_no_connection_before_the_config_agents_are_served(
        tmp_path: Path) -> None:
    """Else a client early after start-up was told 404 (or 401) for an agent of the config."""
    alpha, _ = hosted_entry("alpha")
    cfg, _ = config_dict(tmp_path, "top", extra={"agents": [alpha]})
    seen: list[str] = []

    class Probing(Daemon):
        def _spawn(self, config: Config) -> Daemon:  # as each hosted agent starts
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
                seen.append("accepted")
            except ConnectionRefusedError:
                seen.append("refused")
            return super()._spawn(config)

    daemon = Probing(load_config(write_config(tmp_path, "top", cfg)))
    await daemon.start()
    await daemon.stop()
    assert seen == ["refused"]
