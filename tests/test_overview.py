"""The dashboard's data (butler/overview.py) on real daemons: per-peer statistics come
from the audit trail, so a restart keeps them; each task row says who asked what, when,
and which peer a running delegation waits on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from butler.audit.log import DelegationOutcome
from butler.overview import peer_statistics
from tests.support import Instance, Swarm, call, gated_skill, post_task, wait_task

ADMIN = {"operator": {"tier": "admin"}}


async def _home(swarm: Swarm, office: Instance, tmp_path: Path) -> Instance:
    token_file = tmp_path / "office.token"
    token_file.write_text(office.tokens["home"])
    return await swarm.start("home", skills=[], callers=ADMIN, peers=[{
        "name": "office", "url": office.url, "token_file": str(token_file),
        "capabilities": ["echo", "hold"], "timeout_seconds": 30}])


async def _peer(home: Instance) -> dict[str, Any]:
    status, overview = await call(home, "GET", "/v2/overview")
    assert status == 200, overview
    peer: dict[str, Any]
    peer, = overview["peers"]
    return peer


async def test_peer_statistics_survive_a_restart(swarm: Swarm, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    office = await swarm.start("office", callers={"home": {}}, skills=[
        {"id": "echo", "builtin": "echo", "capabilities": ["echo"], "expose": True},
        gated_skill("hold", gate, capabilities=["hold"], expose=True)])
    home = await _home(swarm, office, tmp_path)
    for _ in range(3):
        _, task = await post_task(home, {"task": "x", "capabilities_needed": ["echo"]})
        assert task["state"] == "completed", task

    # A delegation under way: its row names the peer and the hop it waits on.
    _, held = await post_task(home, {"task": "hold on", "capabilities_needed": ["hold"],
                                     "mode": "async"})
    status, listed = await call(home, "GET", "/v2/overview/tasks?limit=10")
    assert status == 200
    row = next(t for t in listed["tasks"] if t["id"] == held["id"])
    assert row["caller"] == "operator" and row["text"] == "hold on"
    assert row["ended_at"] is None and row["trace_id"] == held["swarm"]["trace_id"]
    wait, = row["waiting_on"]
    assert wait["peer"] == "office" and wait["path"][-2:] == ["home", "office"]
    gate.touch()
    await wait_task(home, held["id"])
    status, listed = await call(home, "GET", "/v2/overview/tasks?limit=10")
    row = next(t for t in listed["tasks"] if t["id"] == held["id"])
    assert row["waiting_on"] == [] and row["ended_at"] is not None

    # office goes away: a failed delegation, counted by its code.
    await swarm.stop(office)
    _, failed = await post_task(home, {"task": "x", "capabilities_needed": ["echo"]})
    assert failed["state"] == "failed", failed
    code = failed["error"]["code"]

    await swarm.stop(home)
    home = await _home(swarm, office, tmp_path)  # the same data folder
    after = (await _peer(home))["history"]
    assert after["delegations"] == 5 and after["errors"] == {code: 1}
    assert 0 < after["median_seconds"] <= after["p95_seconds"]


def test_median_and_95th_percentile_by_nearest_rank() -> None:
    from datetime import UTC, datetime

    outcomes = [DelegationOutcome("a", None, float(s)) for s in range(1, 101)]
    outcomes += [DelegationOutcome("a", "peer_timeout", None),
                 DelegationOutcome("b", "peer_error", 2.0)]
    stats = peer_statistics(outcomes, datetime.now(UTC))
    assert stats["a"]["median_seconds"] == 50.0 and stats["a"]["p95_seconds"] == 95.0
    assert stats["a"]["delegations"] == 101 and stats["a"]["errors"] == {"peer_timeout": 1}
    assert stats["b"] == {**stats["b"], "delegations": 1, "median_seconds": 2.0,
                          "errors": {"peer_error": 1}}
