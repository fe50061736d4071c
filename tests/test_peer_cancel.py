"""A cancel goes down the chain (docs/delegation.md#cancel): a task that delegated and
ends early sends each peer task it was following the peer's own cancel, on the binding
the task runs on, and the local cancel never waits for it."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from butler.delegation.peer_cancel import PeerCancels
from internal.protocol.a2a.client import A2AClient
from internal.protocol.a2a.codec import butler_v2
from internal.protocol.a2a.model import PeerTask, Task, TaskRequest, TaskState
from tests.a2a_support import WAIT
from tests.audit_support import audit_records
from tests.delegation_support import Mesh, a2a_card, butler_with_peer, following, serving
from tests.sdk03_support import sdk03_agent
from tests.sdk_agent import sdk_agent
from tests.support import Instance, Swarm, call, new_pair, post_task, wait_until

NEEDS_GRPC = pytest.mark.skipif(importlib.util.find_spec("grpc") is None,
                                reason="gRPC needs the grpc extra (pip install 'butler-a2a[grpc]')")


def live_tasks(inst: Instance) -> list[Task]:
    """The tasks its engine runs now (what a peer runs for its callers)."""
    return list(inst.daemon.engine._live.values())


async def stored(inst: Instance, task_id: str) -> Task:
    task = await inst.daemon.engine.store.get(task_id)
    assert task is not None, task_id
    return task


async def three_hops(mesh: Mesh, protocol: str = "butler", **home: Any
                     ) -> dict[str, Instance]:
    """home -> office -> lab, where lab's ``wait`` runs until it is canceled; each hop
    over ``protocol`` (``butler``: /v2; ``a2a``: the A2A binding the peer's card offers)."""
    mesh.agent("home", skills=[], **home)
    mesh.agent("office", skills=[])
    mesh.agent("lab", skills=[WAIT])
    mesh.link("home", "office", ["wait"], protocol=protocol)
    mesh.link("office", "lab", ["wait"], protocol=protocol)
    return dict(await mesh.start())


@pytest.mark.parametrize(("protocol", "binding"), [("butler", "butler"), ("a2a", "JSONRPC")])
async def test_a_cancel_at_home_cancels_office_and_lab(mesh: Mesh, protocol: str,
                                                       binding: str) -> None:
    agents = await three_hops(mesh, protocol)
    home, office, lab = agents["home"], agents["office"], agents["lab"]
    # In plain words: A2A carries no capabilities, each hop routes "wait" by intent.
    _, task = await post_task(home, {"task": "wait", "capabilities_needed": ["wait"],
                                     "mode": "async"})
    waiting = await wait_until(lambda: [t for t in live_tasks(lab)
                                        if t.status_message == "waiting"], what="lab works")
    (at_office,) = live_tasks(office)
    status, canceled = await call(home, "POST", f"/v2/tasks/{task['id']}/cancel")
    assert status == 200 and canceled["state"] == "canceled", canceled

    async def ended(inst: Instance, task_id: str) -> bool:
        return (await stored(inst, task_id)).state is TaskState.CANCELED

    await wait_until(lambda: ended(office, at_office.id), what="office's task canceled")
    await wait_until(lambda: ended(lab, waiting[0].id), what="lab's task canceled")
    await mesh.close()
    for agent, peer, peer_task in (("home", "office", at_office), ("office", "lab", waiting[0])):
        (record,) = await audit_records(agents[agent].daemon, "delegation_canceled")
        assert record.decision == "canceled" and record.code is None, record
        assert record.detail["peer"] == peer and record.detail["binding"] == binding
        assert record.detail["peer_task_id"] == peer_task.wire_id


async def test_a_time_limit_cancels_the_peers_task(mesh: Mesh) -> None:
    agents = await three_hops(mesh)
    _, task = await post_task(agents["home"], {"task": "x", "capabilities_needed": ["wait"],
                                               "timeout_seconds": 1})
    assert task["state"] == "failed" and task["error"]["code"] == "task_timeout", task
    lab = agents["lab"]

    async def lab_canceled() -> bool:
        tasks = (await lab.daemon.engine.store.list_tasks(
            owner=None, state=None, context_id=None, cursor=None, limit=5)).tasks
        return bool(tasks) and all(t.state is TaskState.CANCELED for t in tasks)

    await wait_until(lab_canceled, what="lab's task canceled")


async def test_a_stop_cancels_the_peers_task_and_waits_for_the_answer(mesh: Mesh) -> None:
    # Almost no grace: the running task is ended by the stop.
    agents = await three_hops(mesh, extra={"server": {"shutdown_grace_seconds": 0.01}})
    home, office = agents["home"], agents["office"]
    await post_task(home, {"task": "x", "capabilities_needed": ["wait"], "mode": "async"})
    await wait_until(lambda: [t for t in live_tasks(agents["lab"])
                              if t.status_message == "waiting"], what="lab works")
    (at_office,) = live_tasks(office)
    await home.daemon.stop()  # the stop sends the cancel, and waits for its answer
    assert (await stored(office, at_office.id)).state is TaskState.CANCELED
    (record,) = await audit_records(home.daemon, "delegation_canceled")
    assert record.decision == "canceled"


@contextlib.asynccontextmanager
async def stuck_agent(cancel: str) -> AsyncIterator[tuple[str, list[str]]]:
    """An A2A 1.0 agent whose stream says ``working`` and never ends; it answers
    ``CancelTask`` with garbage (``cancel`` "garbage") or never ("never"). Yields its URL
    and the JSON-RPC methods it was called with."""
    methods: list[str] = []
    release = asyncio.Event()  # set at the end: a stuck handler must not hold the cleanup

    async def card(request: web.Request) -> web.Response:
        return web.json_response(a2a_card(f"http://127.0.0.1:{request.url.port}/rpc",
                                          streaming=True))

    async def rpc(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        methods.append(body["method"])
        if body["method"] == "SendStreamingMessage":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b'data: {"jsonrpc": "2.0", "id": 1, "result": {"task": {'
                             b'"id": "t1", "contextId": "c1", '
                             b'"status": {"state": "TASK_STATE_WORKING"}}}}\n\n')
        if cancel == "never" or body["method"] == "SendStreamingMessage":
            await release.wait()
        return web.Response(text="<html>no</html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    app.router.add_post("/rpc", rpc)
    async with serving(app) as url:
        try:
            yield url, methods
        finally:
            release.set()


@pytest.mark.parametrize(("cancel", "code"), [("garbage", "peer_error"),
                                              ("never", "peer_timeout")])
async def test_a_peer_that_answers_a_cancel_badly_does_not_hold_the_task(
        swarm: Swarm, cancel: str, code: str) -> None:
    token, _ = new_pair()
    async with stuck_agent(cancel) as (url, methods):
        home = await butler_with_peer(swarm, url, token, timeout_seconds=1)
        _, task = await post_task(home, {"task": "x", "capabilities_needed": ["shout"],
                                         "mode": "async"})
        await wait_until(lambda: following(home), what="home knows the agent's task")
        status, canceled = await call(home, "POST", f"/v2/tasks/{task['id']}/cancel")
        assert status == 200 and canceled["state"] == "canceled", canceled
        await wait_until(lambda: "CancelTask" in methods, what="the cancel sent")
        await swarm.stop(home)  # waits for the cancel's end, within its bound
    (record,) = await audit_records(home.daemon, "delegation_canceled")
    assert record.decision == "error" and record.code == code, record
    assert record.detail["peer_task_id"] == "t1" and record.detail["binding"] == "JSONRPC"


@pytest.mark.parametrize(("binding", "version"), [
    ("JSONRPC", "1.0"), ("HTTP+JSON", "1.0"), ("JSONRPC", "0.3"),
    pytest.param("GRPC", "1.0", marks=NEEDS_GRPC),
])
async def test_a_cancel_reaches_an_sdk_agent(swarm: Swarm, binding: str, version: str) -> None:
    token, _ = new_pair()
    async with sdk_agent(token, binding=binding, version=version, reply="wait") as agent:
        home = await butler_with_peer(swarm, agent.url, token)
        _, task = await post_task(home, {"task": "x", "capabilities_needed": ["shout"],
                                         "mode": "async"})
        (peer_task,) = await wait_until(lambda: agent.seen.working, what="the agent works")
        await wait_until(lambda: following(home), what="home knows the agent's task")
        status, canceled = await call(home, "POST", f"/v2/tasks/{task['id']}/cancel")
        assert status == 200 and canceled["state"] == "canceled", canceled
        await wait_until(lambda: agent.seen.cancels, what="the agent's cancel")
        assert agent.seen.cancels == [peer_task]

        async def peer_canceled() -> bool:
            return await agent.state(peer_task) == "TASK_STATE_CANCELED"

        await wait_until(peer_canceled, what="the agent's task canceled")
        await swarm.stop(home)
    (record,) = await audit_records(home.daemon, "delegation_canceled")
    assert record.decision == "canceled" and record.detail["binding"] == binding, record


async def test_a_cancel_reaches_an_a2a_sdk_0_3_agent(swarm: Swarm, sdk03: Path) -> None:
    """The official 0.3 SDK's server (its own interpreter): ``tasks/cancel`` on JSON-RPC."""
    token, _ = new_pair()
    headers = {"Authorization": f"Bearer {token}"}
    async with sdk03_agent(sdk03, token, mode="wait") as url:

        async def canceled_there() -> dict[str, list[str]] | None:
            """What the agent saw, once it saw a cancel."""
            async with swarm.session.get(url + "/test/seen", headers=headers) as resp:
                found: dict[str, list[str]] = await resp.json()
            return found if found["cancels"] else None

        home = await butler_with_peer(swarm, url, token)
        _, task = await post_task(home, {"task": "x", "capabilities_needed": ["shout"],
                                         "mode": "async"})
        await wait_until(lambda: following(home), what="home knows the agent's task")
        status, canceled = await call(home, "POST", f"/v2/tasks/{task['id']}/cancel")
        assert status == 200 and canceled["state"] == "canceled", canceled
        agent = await wait_until(canceled_there, what="the agent's cancel")
        assert agent["cancels"] == agent["working"] and len(agent["cancels"]) == 1
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get",
                "params": {"id": agent["working"][0]}}
        async with swarm.session.post(url, json=body, headers=headers) as resp:
            peer_task = (await resp.json())["result"]
        assert peer_task["status"]["state"] == "canceled", peer_task
        await swarm.stop(home)
    (record,) = await audit_records(home.daemon, "delegation_canceled")
    assert record.decision == "canceled" and record.detail["binding"] == "JSONRPC", record


async def test_a_cancel_that_overtakes_the_task_is_sent_again(http: aiohttp.ClientSession
                                                              ) -> None:
    """A Butler peer is sent the task under an id chosen here: a cancel that arrives before
    the task itself finds no such task yet, and goes again until the peer knows it."""
    asked: list[str] = []

    async def cancel(request: web.Request) -> web.Response:
        asked.append(request.match_info["id"])
        if len(asked) == 1:
            return web.json_response({"error": {"code": "task_not_found",
                                                 "message": "no such task"}}, status=404)
        task = Task(id=request.match_info["id"], context_id="c", owner="home",
                         state=TaskState.CANCELED, request=TaskRequest(), created_at="",
                         updated_at="")
        return web.Response(body=butler_v2.task_json(task), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v2/tasks/{id}/cancel", cancel)
    records: list[dict[str, Any]] = []
    cancels = PeerCancels(lambda kind, **fields: records.append({"kind": kind, **fields}))
    async with serving(app) as url:
        client = A2AClient(url, "t0k", session=http, protocol="butler", name="office")
        peer_task = PeerTask("office", "t-1", binding="butler", url=url)
        cancels.send(client, peer_task, seconds=5, record={"caller": "home", "task_id": "h-1",
                                                          "chain": (), "detail": {}})
        await cancels.aclose()
    assert asked == ["t-1", "t-1"]
    (record,) = records
    assert record["kind"] == "delegation_canceled" and record["decision"] == "canceled"
