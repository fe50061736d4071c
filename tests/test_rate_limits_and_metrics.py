"""Rate limits answer 429 with Retry-After before any work; /metrics counts what happened."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from tests.delegation_support import free_port
from tests.support import ECHO, Swarm, gated_skill, wait_until


async def test_per_caller_limit_is_429_with_retry_after(
    swarm: Swarm, http: aiohttp.ClientSession
) -> None:
    home = await swarm.start("home", callers={"alice": {}, "bob": {}}, extra={
        "rate_limits": {"per_caller_per_second": 1, "per_caller_burst": 3,
                        "per_address_per_second": 0}})
    statuses = []
    for _ in range(6):
        async with http.get(f"{home.url}/v2/card", headers=home.headers("alice")) as resp:
            statuses.append(resp.status)
            if resp.status == 429:
                assert int(resp.headers["Retry-After"]) >= 1
                assert (await resp.json())["error"]["code"] == "rate_limited"
    assert statuses[:3] == [200, 200, 200] and 429 in statuses[3:]
    async with http.get(f"{home.url}/v2/card", headers=home.headers("bob")) as resp:
        assert resp.status == 200  # another caller has its own bucket


async def test_per_address_limit_applies_before_authentication(
    swarm: Swarm, http: aiohttp.ClientSession
) -> None:
    home = await swarm.start("home", extra={
        "rate_limits": {"per_address_per_second": 1, "per_address_burst": 2}})
    statuses = []
    for _ in range(3):
        async with http.get(f"{home.url}/v2/card",
                            headers={"Authorization": "Bearer wrong"}) as resp:
            statuses.append(resp.status)
    # (The 429 is held until the bucket has room again: server.refusal_hold_seconds.)
    assert statuses == [401, 401, 429]


async def test_running_tasks_per_caller_are_capped_before_any_work(
    swarm: Swarm, http: aiohttp.ClientSession, tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    home = await swarm.start("home", skills=[ECHO, gated_skill("slow", gate)],
                             extra={"rate_limits": {"max_inflight_tasks_per_caller": 2}})
    for _ in range(2):
        async with http.post(f"{home.url}/v2/tasks", headers=home.headers(),
                             json={"task": "x", "skill": "slow", "mode": "async"}) as resp:
            assert resp.status == 202
    async with http.post(f"{home.url}/v2/tasks", headers=home.headers(),
                         json={"task": "x", "skill": "echo"}) as resp:
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "1"
    page = await home.client().list_tasks()
    assert len(page["tasks"]) == 2  # the refused one was never created
    gate.touch()


async def test_a_callers_ended_tasks_leave_its_cap(
    swarm: Swarm, http: aiohttp.ClientSession, tmp_path: Path,
) -> None:
    """The cap counts running tasks: one that completed or was canceled frees its place
    (the engine keeps a count per caller, not a scan of the runs)."""
    home = await swarm.start("home", skills=[ECHO, gated_skill("slow", tmp_path / "gate")],
                             extra={"rate_limits": {"max_inflight_tasks_per_caller": 1}})
    for _ in range(3):
        async with http.post(f"{home.url}/v2/tasks", headers=home.headers(),
                             json={"task": "x", "skill": "echo"}) as resp:
            assert resp.status == 200
    async with http.post(f"{home.url}/v2/tasks", headers=home.headers(),
                         json={"task": "x", "skill": "slow", "mode": "async"}) as resp:
        assert resp.status == 202
        slow = (await resp.json())["id"]
    async with http.post(f"{home.url}/v2/tasks", headers=home.headers(),
                         json={"task": "x", "skill": "echo"}) as resp:
        assert resp.status == 429
    async with http.post(f"{home.url}/v2/tasks/{slow}/cancel", headers=home.headers()) as resp:
        assert resp.status == 200
    async with http.post(f"{home.url}/v2/tasks", headers=home.headers(),
                         json={"task": "x", "skill": "echo"}) as resp:
        assert resp.status == 200


async def test_metrics_count_requests_tasks_and_refusals(
    swarm: Swarm, http: aiohttp.ClientSession
) -> None:
    home = await swarm.start("home", callers={"operator": {"bound": False}})
    async with http.post(f"{home.url}/v2/tasks", headers=home.headers(),
                         json={"task": "x", "skill": "echo"}) as resp:
        assert resp.status == 200
    async with http.post(f"{home.url}/v2/tasks", headers=home.headers(),
                         json={"task": "x", "skill": "echo", "caller_chain": ["home"]}) as resp:
        assert resp.status == 409
    async with http.get(f"{home.url}/metrics") as resp:
        assert resp.status == 401  # on the main port, metrics need a token
    async with http.get(f"{home.url}/metrics", headers=home.headers()) as resp:
        assert resp.status == 200
        text = await resp.text()
    assert 'butler_http_requests_total{route="POST /v2/tasks",status="200"} 1' in text
    assert 'butler_http_requests_total{route="POST /v2/tasks",status="409"} 1' in text
    assert 'butler_tasks_finished_total{state="completed"} 1' in text
    assert 'butler_refusals_total{code="loop_detected"} 1' in text
    assert "# TYPE butler_budget_spent_usd_total counter" in text


async def test_metrics_on_a_separate_loopback_port(
    swarm: Swarm, http: aiohttp.ClientSession
) -> None:
    port = free_port()
    home = await swarm.start("home", extra={"metrics": {"listen": f"127.0.0.1:{port}"}})
    async with http.get(f"{home.url}/metrics", headers=home.headers()) as resp:
        assert resp.status == 404
    async def answered() -> bool:
        try:
            async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                assert resp.status == 200
                assert "butler_http_requests_total" in await resp.text()
                return True
        except aiohttp.ClientConnectionError:
            return False

    await wait_until(answered, what="the metrics port answering")


async def test_every_kind_of_refusal_is_counted_and_audited(
    swarm: Swarm, http: aiohttp.ClientSession
) -> None:
    # Regression: only refusals from the envelope check were recorded, not a budget too
    # small for the skill, nor a forbidden tier.
    home = await swarm.start("home", callers={"operator": {"bound": False}}, skills=[
        {"id": "pricey", "builtin": "echo", "cost_usd": "1.00", "expose": True},
        {"id": "gold", "builtin": "echo", "expose": True, "tier": "gold"}])
    for body, status in (({"task": "x", "skill": "pricey", "budget": "0.10"}, 402),
                         ({"task": "x", "skill": "gold"}, 403)):
        async with http.post(f"{home.url}/v2/tasks", headers=home.headers(), json=body) as r:
            assert r.status == status
    async with http.get(f"{home.url}/metrics", headers=home.headers()) as resp:
        text = await resp.text()
    assert 'butler_refusals_total{code="budget_exhausted"} 1' in text
    assert 'butler_refusals_total{code="forbidden"} 1' in text
    config = home.daemon.config
    await swarm.stop(home)
    from butler.audit import AuditLog

    def refusal_codes() -> list[str | None]:
        with AuditLog(config.data_dir / "audit.db") as audit:  # blocking: not on the loop
            return [r.code for r in audit.tail(10) if r.kind == "refusal"]

    codes = await asyncio.to_thread(refusal_codes)
    assert codes == ["budget_exhausted", "forbidden"]
