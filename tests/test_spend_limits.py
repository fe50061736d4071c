"""Per-caller limits (a token entry's ``limits``): grants and spend caps across task trees,
on real daemons. Refused before any work and any outbound call, counted in rolling windows
kept across restarts, visible in /metrics and ``butler spend``."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from butler.audit import AuditLog
from butler.config import load_config
from butler.config.model import CallerLimits
from butler.config.node import ConfigError
from butler.daemon import Daemon
from butler.delegation.wiring import make_delegator
from butler.swarm.spend import SpendBook
from butler.swarm.spend_windows import Usage
from internal.protocol.a2a.model import Refusal
from tests.a2a_support import ASK, error_reason, plain_message, rpc
from tests.delegation_support import Mesh
from tests.support import (
    ECHO,
    Instance,
    Swarm,
    call,
    plugin_skill,
    post_task,
    run_cli,
    wait_task,
)

RECORD = plugin_skill("record", "tests.plugins.spending:record", cost_usd="0.10",
                      capabilities=["record"])
HOUR = 3600


class FakeClock:
    """The wall clock of the spend windows, moved by the test instead of waited for."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0  # on a minute boundary

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def start(swarm: Swarm, limits: dict[str, Any], clock: FakeClock | None = None,
                skills: list[dict[str, Any]] | None = None) -> Instance:
    return await swarm.start(
        "home", callers={"operator": {"tier": "admin"}, "metered": {"limits": limits}},
        skills=skills if skills is not None else [ECHO, RECORD, ASK],
        daemon_kwargs={"clock": clock or FakeClock()})


def recorded(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


async def audit_records(inst: Instance, swarm: Swarm, kind: str) -> list[Any]:
    """Stops ``inst`` (which holds its audit log) and reads its records of ``kind``."""
    path = inst.daemon.config.data_dir / "audit.db"
    await swarm.stop(inst)

    def read() -> list[Any]:
        with AuditLog(path) as audit:  # blocking: not on the loop
            return [r for r in audit.tail(1000) if r.kind == kind]

    return await asyncio.to_thread(read)


async def test_an_hourly_cap_refuses_before_any_work(swarm: Swarm, tmp_path: Path) -> None:
    home = await start(swarm, {"max_usd_per_task": "0.10", "max_usd_per_hour": "0.25"})
    log = tmp_path / "ran.log"
    body = {"task": "x", "skill": "record", "input": {"log": str(log)}}
    for _ in range(2):
        status, task = await post_task(home, body, who="metered")
        assert status == 200 and task["state"] == "completed", task
        # The budget is clamped to max_usd_per_task, not the 5.00 the swarm allows.
        assert task["budget"] == {"start_usd": "0.10", "spent_usd": "0.10", "left_usd": "0.00"}
    async with home.session.post(home.url + "/v2/tasks", json=body,
                                 headers=home.headers("metered")) as resp:
        refused = await resp.json()
        assert resp.status == 402, refused
        retry_after = int(resp.headers["Retry-After"])
    assert refused["error"]["code"] == "spend_limit_reached"
    assert refused["error"]["details"]["limit"] == "max_usd_per_hour"
    assert 0 < retry_after <= HOUR + 60
    assert len(recorded(log)) == 2  # the skill did not run a third time
    # Another caller is not held by this one's cap.
    status, task = await post_task(home, body)
    assert status == 200 and task["state"] == "completed"
    refusals = await audit_records(home, swarm, "refusal")
    assert [(r.caller, r.code) for r in refusals] == [("metered", "spend_limit_reached")]


async def test_windows_roll_and_survive_a_restart(swarm: Swarm) -> None:
    clock = FakeClock()
    limits = {"max_tasks_per_hour": 2, "max_tasks_per_day": 3}
    home = await start(swarm, limits, clock)
    echo = {"task": "x", "skill": "echo"}
    for _ in range(2):
        assert (await post_task(home, echo, who="metered"))[0] == 200
    status, body = await post_task(home, echo, who="metered")
    assert status == 402 and body["error"]["details"]["limit"] == "max_tasks_per_hour"
    clock.advance(HOUR + 60)  # the first two leave the hour, not the day
    assert (await post_task(home, echo, who="metered"))[0] == 200
    status, body = await post_task(home, echo, who="metered")
    assert status == 402 and body["error"]["details"]["limit"] == "max_tasks_per_day"
    assert body["error"]["details"]["retry_after_seconds"] > 20 * HOUR

    # A restart on the same data folder remembers: still refused.
    config = home.daemon.config
    await swarm.stop(home)
    again = Daemon(config, delegator_factory=make_delegator, clock=clock)
    await again.start()
    try:
        restarted = Instance(again, home.tokens, home.config_path, home.session)
        status, body = await post_task(restarted, echo, who="metered")
        assert status == 402 and body["error"]["details"]["limit"] == "max_tasks_per_day"
        clock.advance(24 * HOUR)
        assert (await post_task(restarted, echo, who="metered"))[0] == 200
    finally:
        await again.stop()


async def test_a_daily_usd_cap_counts_past_the_hour(swarm: Swarm, tmp_path: Path) -> None:
    clock = FakeClock()
    home = await start(swarm, {"max_usd_per_task": "0.10", "max_usd_per_hour": "0.20",
                               "max_usd_per_day": "0.30"}, clock)
    body = {"task": "x", "skill": "record", "input": {"log": str(tmp_path / "ran.log")}}
    for _ in range(2):
        assert (await post_task(home, body, who="metered"))[0] == 200
    status, refused = await post_task(home, body, who="metered")
    assert status == 402 and refused["error"]["details"]["limit"] == "max_usd_per_hour"
    clock.advance(HOUR)
    assert (await post_task(home, body, who="metered"))[0] == 200
    status, refused = await post_task(home, body, who="metered")
    assert status == 402 and refused["error"]["details"]["limit"] == "max_usd_per_day"
    assert len(recorded(tmp_path / "ran.log")) == 3


async def test_a_reservation_settles_to_what_was_spent(swarm: Swarm) -> None:
    # Each echo (free) reserves the whole hourly cap while it runs, then gives it back.
    home = await start(swarm, {"max_usd_per_hour": "0.10"})
    for _ in range(3):
        status, task = await post_task(home, {"task": "x", "skill": "echo"}, who="metered")
        assert status == 200 and task["budget"]["start_usd"] == "0.10", task


async def test_parallel_trees_cannot_together_exceed_the_hourly_cap(swarm: Swarm) -> None:
    home = await start(swarm, {"max_usd_per_task": "0.10", "max_usd_per_hour": "0.30"})
    # ``ask`` waits for an answer: all ten are in flight at once, none has spent yet.
    answers = await asyncio.gather(*(
        post_task(home, {"task": "x", "skill": "ask", "mode": "async"}, who="metered")
        for _ in range(10)))
    admitted = [task for status, task in answers if status in (200, 202)]
    refused = [task for status, task in answers if status == 402]
    assert len(admitted) == 3 and len(refused) == 7, answers
    assert {t["error"]["code"] for t in refused} == {"spend_limit_reached"}
    for task in admitted:
        await wait_task(home, task["id"], {"input-required"}, who="metered")
        status, done = await call(home, "POST", f"/v2/tasks/{task['id']}/input",
                                  who="metered", body={"task": "ann"})
        assert status == 200 and done["state"] == "completed", done
    status, _ = await post_task(home, {"task": "x", "skill": "echo"}, who="metered")
    assert status == 200  # they spent nothing (ask is free): the hour has room again


async def test_grants_refuse_other_skills_and_capabilities(swarm: Swarm, tmp_path: Path) -> None:
    home = await start(swarm, {"skills": ["echo"], "capabilities": ["echo"]})
    log = tmp_path / "ran.log"
    for body in ({"task": "x", "skill": "record", "input": {"log": str(log)}},
                 {"task": "x", "capabilities_needed": ["record"], "input": {"log": str(log)}}):
        status, refused = await post_task(home, body, who="metered")
        assert status == 403 and refused["error"]["code"] == "forbidden", refused
        assert refused["error"]["details"]["not_granted"] == ["record"]
    assert recorded(log) == []
    assert (await post_task(home, {"task": "x", "skill": "echo"}, who="metered"))[0] == 200


async def test_refused_before_any_outbound_call(mesh: Mesh, tmp_path: Path,
                                                http: aiohttp.ClientSession) -> None:
    mesh.agent("home", skills=[], callers={
        "metered": {"limits": {"max_usd_per_task": "0.10", "max_usd_per_hour": "0.15"}},
        "local": {"limits": {"skills": ["echo"]}}})
    mesh.agent("office", skills=[RECORD])
    mesh.link("home", "office", ["record"], cost_usd="0.10")
    agents = await mesh.start()
    home = agents["home"]
    log = tmp_path / "ran.log"
    body = {"task": "x", "capabilities_needed": ["record"], "input": {"log": str(log)}}
    status, task = await post_task(home, body, who="metered")
    assert status == 200 and task["state"] == "completed", task
    status, refused = await post_task(home, body, who="metered")
    assert status == 402 and refused["error"]["code"] == "spend_limit_reached"
    # Without a2a.delegate in its skills, a caller's task is never delegated.
    status, refused = await post_task(home, body, who="local")
    assert status == 403 and "a2a.delegate" in refused["error"]["message"]
    assert len(recorded(log)) == 1  # office ran the first one only


async def test_the_a2a_bindings_map_the_refusal(swarm: Swarm) -> None:
    home = await start(swarm, {"max_tasks_per_hour": 1})
    params = {"message": plain_message("hi")}
    status, answer = await rpc(home, "SendMessage", params, who="metered")
    assert status == 200 and "result" in answer, answer
    status, answer = await rpc(home, "SendMessage", params, who="metered")
    assert status == 200 and answer["error"]["code"] == -31402, answer
    assert error_reason(answer["error"]) == "SPEND_LIMIT_REACHED"
    async with home.session.post(home.url + "/message:send", json=params, headers={
            **home.headers("metered"), "A2A-Version": "1.0"}) as resp:
        assert resp.status == 402 and "Retry-After" in resp.headers
        assert (await resp.json())["error"]["status"] == "RESOURCE_EXHAUSTED"


async def test_metrics_and_the_cli_show_the_spend(swarm: Swarm, tmp_path: Path) -> None:
    home = await start(swarm, {"max_usd_per_task": "0.10", "max_usd_per_hour": "0.25",
                               "max_tasks_per_day": 50})
    body = {"task": "x", "skill": "record", "input": {"log": str(tmp_path / "ran.log")}}
    assert (await post_task(home, body, who="metered"))[0] == 200
    async with home.session.get(home.url + "/metrics", headers=home.headers()) as resp:
        text = await resp.text()
    assert 'butler_caller_window_usd{caller="metered",window="hour"} 0.1' in text
    assert 'butler_caller_window_tasks{caller="metered",window="day"} 1' in text
    assert 'butler_caller_limit_usd{caller="metered",window="hour"} 0.25' in text
    assert 'butler_caller_spent_usd_total{caller="metered"} 0.10' in text

    code, out, err = await run_cli("spend", "-c", str(home.config_path))
    assert code == 0, err
    assert "metered" in out and "0.10 of 0.25 USD" in out and "1 of 50 tasks" in out
    code, out, _ = await run_cli("tasks", "list", home.url, token=home.tokens["metered"])
    assert code == 0 and "0.10 of 0.10 USD" in out


@pytest.mark.parametrize(("limits", "problem"), [
    ("{max_usd_per_hour: 0}", "limits.max_usd_per_hour: must be more than 0"),
    ("{max_usd_per_hour: 2, max_usd_per_day: 1}", "limits.max_usd_per_hour: is more than"),
    ("{max_tasks_per_day: -1}", "limits.max_tasks_per_day: must be >= 1"),
    ("{skils: [echo]}", "limits.skils: unknown key"),
    ("{skills: echo}", "limits.skills: expected a list"),
])
def test_bad_limits_name_the_key(tmp_path: Path, limits: str, problem: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("configurations:\n  a2a:\n    token_hashes:\n"
                    f"      - {{sha256: {'a' * 64}, name: office, limits: {limits}}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"configurations.a2a.token_hashes[0].{problem}" in str(err.value)


def test_tokens_of_one_caller_share_its_limits(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    capped = "limits: {max_tasks_per_day: 1}"
    path.write_text("configurations:\n  a2a:\n    token_hashes:\n"
                    f"      - {{sha256: {'a' * 64}, name: office, {capped}}}\n"
                    f"      - {{sha256: {'b' * 64}, name: office}}\n")
    with pytest.raises(ConfigError, match=r"token_hashes\[1\]: the tokens of 'office'"):
        load_config(path)


async def test_a_task_cut_off_by_a_crash_keeps_its_reservation(tmp_path: Path) -> None:
    clock = FakeClock()
    limits = {"metered": CallerLimits(max_usd_per_hour=Decimal("1"))}
    book = await SpendBook.open(limits, tmp_path, clock)
    assert await book.reserve("metered", "t1", Decimal("5"), Decimal("0")) == Decimal("1")
    await book.close()  # and never settled: what the task spent is not known
    again = await SpendBook.open(limits, tmp_path, clock)
    try:
        [use] = again.usage()
        assert use.hour == Usage(Decimal("1"), 1) and use.running == 0
        with pytest.raises(Refusal) as err:
            await again.reserve("metered", "t2", Decimal("5"), Decimal("0"))
        assert err.value.code == "spend_limit_reached" and err.value.retry_after == HOUR
        clock.advance(HOUR)
        assert await again.reserve("metered", "t2", Decimal("5"), Decimal("0")) == Decimal("1")
    finally:
        await again.close()
