"""Delegation between real daemons on loopback: routing, refusals, budget, costs."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import aiohttp
import pytest

from internal.protocol.a2a.model import TaskRequest, TaskState
from tests.delegation_support import Mesh, skill


async def post(http: aiohttp.ClientSession, url: str, token: str, body: dict[str, object],
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    hdrs = {"Authorization": f"Bearer {token}", **(headers or {})}
    async with http.post(f"{url}/v2/tasks", json=body, headers=hdrs) as resp:
        return resp.status, await resp.json()


async def test_home_and_office_delegate_to_each_other(mesh: Mesh) -> None:
    mesh.agent("home", skills=[skill("home.notes", "0.01")])
    mesh.agent("office", skills=[skill("office.print", "0.02")])
    mesh.link("home", "office", ["office.print"])
    mesh.link("office", "home", ["home.notes"])
    agents = await mesh.start()

    to_office = await agents["home"].client().submit(
        TaskRequest(text="print this", capabilities_needed=("office.print",)))
    assert to_office.state is TaskState.COMPLETED
    assert to_office.parts[0].text == "print this"
    assert to_office.skill == "a2a.delegate"
    assert to_office.budget is not None and to_office.budget.spent_usd == Decimal("0.02")
    assert to_office.cost is not None
    assert [c.agent for c in to_office.cost.children] == ["office"]
    assert to_office.cost.children[0].skill == "office.print"

    to_home = await agents["office"].client().submit(
        TaskRequest(text="note this", capabilities_needed=("home.notes",)))
    assert to_home.state is TaskState.COMPLETED
    assert to_home.cost is not None and to_home.cost.children[0].agent == "home"


async def test_loop_is_refused_with_409_and_reaches_the_first_caller(mesh: Mesh) -> None:
    # b knows a under another name, so its router cannot see the loop coming; a must.
    mesh.agent("a", skills=[])
    mesh.agent("b", skills=[])
    mesh.link("a", "b", ["x.work"])
    mesh.link("b", "a", ["x.work"], name="alias-of-a")
    agents = await mesh.start()

    task = await agents["a"].client().submit(
        TaskRequest(text="go", capabilities_needed=("x.work",)))
    assert task.state is TaskState.FAILED
    assert task.error is not None and task.error.code == "loop_detected"
    assert "alias-of-a" in task.error.message or "a is already" in task.error.message
    assert task.budget is not None and task.budget.spent_usd == 0


async def test_direct_loop_and_depth_refusals(mesh: Mesh, http: aiohttp.ClientSession) -> None:
    mesh.agent("home", swarm={"max_depth": 2})
    agents = await mesh.start()
    home = agents["home"]
    token = home.tokens["operator"]
    status, body = await post(http, home.url, token,
                              {"task": "x", "skill": "echo", "caller_chain": ["a", "home"]})
    assert status == 409 and body["error"]["code"] == "loop_detected"
    # Names compare as the registry compares them (NFKC, case folded): "HOME" is home.
    for spelled in ("HOME", "hOmE"):
        status, body = await post(http, home.url, token, {"task": "x", "skill": "echo"},
                                  {"X-Swarm-Agent-Chain": f"a,{spelled}", "X-Swarm-Depth": "2"})
        assert status == 409 and body["error"]["code"] == "loop_detected", spelled
        status, body = await post(http, home.url, token, {
            "task": "x", "skill": "echo", "caller_chain": ["a", spelled]})
        assert status == 409 and body["error"]["code"] == "loop_detected", spelled
    status, body = await post(http, home.url, token,
                              {"task": "x", "skill": "echo", "caller_chain": ["a", "b", "c"]})
    assert status == 422 and body["error"]["code"] == "depth_exceeded"
    status, body = await post(http, home.url, token, {"task": "x", "skill": "echo"},
                              {"X-Swarm-Agent-Chain": "a,b,c", "X-Swarm-Depth": "3"})
    assert status == 422 and body["error"]["code"] == "depth_exceeded"
    status, body = await post(http, home.url, token,
                              {"task": "x", "skill": "echo", "caller_chain": ["a", "b"]})
    assert status == 200 and body["state"] == "completed"


async def test_depth_limit_stops_the_chain_before_the_far_peer(
    mesh: Mesh, http: aiohttp.ClientSession
) -> None:
    calls: list[str] = []

    async def far(request: aiohttp.web.Request) -> aiohttp.web.Response:
        calls.append(request.path)
        return aiohttp.web.json_response({"error": {"code": "forbidden", "message": "no"}},
                                         status=403)

    from aiohttp import web

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", far)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    far_url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        for name in ("a", "b", "c"):
            mesh.agent(name, skills=[], swarm={"max_depth": 2})
        mesh.link("a", "b", ["x.work"])
        mesh.link("b", "c", ["x.work"])
        mesh.link("c", "a", ["x.work"], name="far", url=far_url)
        agents = await mesh.start()
        task = await agents["a"].client().submit(
            TaskRequest(text="deep", capabilities_needed=("x.work",)))
        assert task.state is TaskState.FAILED
        assert task.error is not None and task.error.code == "depth_exceeded"
        assert calls == []
    finally:
        await runner.cleanup()


async def test_budget_refusals_run_nothing(mesh: Mesh, http: aiohttp.ClientSession) -> None:
    mesh.agent("home", skills=[])
    mesh.agent("office", skills=[skill("office.costly", "0.10")])
    mesh.link("home", "office", ["office.costly"])
    agents = await mesh.start()
    home, office = agents["home"], agents["office"]

    # Asked directly with too small a budget: 402 and no task ran.
    status, body = await post(http, office.url, office.tokens["operator"],
                              {"task": "x", "skill": "office.costly", "budget": "0.05"})
    assert status == 402 and body["error"]["code"] == "budget_exhausted"

    # Through home: office refuses, home's caller sees a failed task saying why.
    status, body = await post(http, home.url, home.tokens["operator"], {
        "task": "x", "capabilities_needed": ["office.costly"], "budget": "0.05"})
    assert status == 200
    assert body["state"] == "failed" and body["error"]["code"] == "budget_exhausted"
    assert body["budget"] == {"start_usd": "0.05", "spent_usd": "0", "left_usd": "0.05"}
    page = await office.client().list_tasks()
    assert page["tasks"] == []  # no task was created, so no skill ran


async def test_known_peer_price_is_refused_before_any_call(
    mesh: Mesh, http: aiohttp.ClientSession
) -> None:
    mesh.agent("home", skills=[])
    mesh.agent("office", skills=[skill("office.costly", "0.10")])
    mesh.link("home", "office", ["office.costly"], cost_usd="0.10")
    agents = await mesh.start()
    status, body = await post(http, agents["home"].url, agents["home"].tokens["operator"], {
        "task": "x", "capabilities_needed": ["office.costly"], "budget": "0.05"})
    assert status == 402 and body["error"]["code"] == "budget_exhausted"
    records = agents["office"].daemon.engine.deps  # office saw nothing
    assert records is not None
    assert (await agents["office"].client().list_tasks())["tasks"] == []


async def test_budget_is_capped_by_the_receiver(mesh: Mesh, http: aiohttp.ClientSession) -> None:
    mesh.agent("home", swarm={"budget_usd": "0.50"})
    agents = await mesh.start()
    status, body = await post(http, agents["home"].url, agents["home"].tokens["operator"],
                              {"task": "x", "skill": "echo", "budget": "1000"})
    assert status == 200 and body["budget"]["start_usd"] == "0.50"


async def test_forged_chain_is_refused(mesh: Mesh, http: aiohttp.ClientSession) -> None:
    mesh.agent("home")
    mesh.agent("office")
    mesh.link("office", "home", ["echo"])
    agents = await mesh.start()
    token = agents["home"].tokens["office"]
    status, body = await post(http, agents["home"].url, token,
                              {"task": "x", "skill": "echo", "caller_chain": ["mallory"]})
    assert status == 403 and body["error"]["code"] == "chain_mismatch"
    status, body = await post(http, agents["home"].url, token,
                              {"task": "x", "skill": "echo", "caller_chain": ["office"]})
    assert status == 200


@pytest.mark.parametrize(("body", "headers"), [
    ({"budget": "-1"}, {}),
    ({"budget": "lots"}, {}),
    ({"budget": True}, {}),
    ({"budget": "NaN"}, {}),
    ({"caller_chain": ["ok", "not an id!"]}, {}),
    ({"caller_chain": "a,b"}, {}),
    ({"caller_chain": ["a", "b"]}, {"X-Swarm-Depth": "5"}),
    ({"caller_chain": ["a"]}, {"X-Swarm-Agent-Chain": "b"}),
    ({}, {"X-Swarm-Depth": "two"}),
    ({}, {"X-Swarm-Trace-ID": "not-hex"}),
])
async def test_garbage_envelopes_are_400(
    mesh: Mesh, http: aiohttp.ClientSession, body: dict[str, object], headers: dict[str, str]
) -> None:
    mesh.agent("home")
    agents = await mesh.start()
    status, answer = await post(http, agents["home"].url, agents["home"].tokens["operator"],
                                {"task": "x", "skill": "echo", **body}, headers)
    assert status == 400, answer
    assert answer["error"]["code"] in ("invalid_envelope", "invalid_request")


async def test_transport_failure_moves_to_the_next_peer(mesh: Mesh) -> None:
    from tests.delegation_support import free_port

    mesh.agent("home", skills=[])
    mesh.agent("office", skills=[skill("x.work")])
    mesh.link("home", "office", ["x.work"], name="down", url=f"http://127.0.0.1:{free_port()}")
    mesh.link("home", "office", ["x.work"], cost_usd="0.01")
    agents = await mesh.start()
    task = await agents["home"].client().submit(
        TaskRequest(text="hi", capabilities_needed=("x.work",), blocking=True))
    assert task.state is TaskState.COMPLETED
    assert task.cost is not None and task.cost.children[0].agent == "office"


async def test_hung_peer_fails_at_its_deadline(mesh: Mesh) -> None:
    import asyncio
    import time

    from aiohttp import web

    async def hang(request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    app = web.Application()
    app.router.add_post("/v2/tasks", hang)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        mesh.agent("home", skills=[])
        mesh.agent("office", skills=[])
        mesh.link("home", "office", ["x.work"], name="hung", url=url, timeout_seconds=1)
        agents = await mesh.start()
        started = time.monotonic()
        task = await agents["home"].client().submit(
            TaskRequest(text="hi", capabilities_needed=("x.work",)))
        elapsed = time.monotonic() - started
        assert task.state is TaskState.FAILED
        assert task.error is not None and task.error.code == "peer_timeout"
        assert elapsed >= 0.9, "not before its deadline"
    finally:
        await runner.cleanup()


async def test_fan_out_grants_never_exceed_what_is_left(mesh: Mesh) -> None:
    mesh.agent("home", skills=[{"id": "fan", "python": "tests.plugins.fanout:fan_out",
                                "capabilities": ["fan"], "cost_usd": "0.10", "expose": True}],
               swarm={"budget_usd": "1.00"})
    mesh.agent("office", skills=[skill("x.work", "0.25")])
    mesh.link("home", "office", ["x.work"])
    agents = await mesh.start()
    task = await agents["home"].client().submit(TaskRequest(
        text="go", skill="fan", input={"children": 4, "capability": "x.work"}))
    assert task.state is TaskState.COMPLETED, task.error
    data = task.parts[0].data
    assert data is not None
    states = [g["state"] for g in data["grants"]]
    # 1.00 - 0.10 reserved for fan itself leaves 0.90: three children at 0.25 fit.
    assert states == ["completed", "completed", "completed", "budget_exhausted"]
    for grant in data["grants"]:
        assert Decimal(grant["spent"]) <= Decimal(grant["left_before"])
    assert task.budget is not None
    assert task.budget.spent_usd == Decimal("0.85")
    assert task.budget.spent_usd + task.budget.left_usd == task.budget.start_usd
    assert task.cost is not None and task.cost.total_usd == Decimal("0.85")
    assert len(task.cost.children) == 3


async def test_workspace_is_shared_within_a_tree(mesh: Mesh) -> None:
    mesh.agent("home", skills=[{"id": "share", "python": "tests.plugins.fanout:share",
                                "expose": True}])
    agents = await mesh.start()
    task = await agents["home"].client().submit(TaskRequest(text="remember", skill="share"))
    assert task.state is TaskState.COMPLETED, task.error
    assert task.parts[0].data == {"read_back": {"text": "remember"}}
