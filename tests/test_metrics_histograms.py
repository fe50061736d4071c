"""/metrics on real daemons: every created task is counted once, routing failures
included, and latency histograms per route, skill and peer parse as Prometheus reads them."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import aiohttp
import pytest

from butler.metrics import Registry
from tests.delegation_support import Mesh, skill
from tests.prometheus_text import histogram, parse, value
from tests.support import Instance, Swarm, gated_skill, post_task, wait_task


async def scrape(http: aiohttp.ClientSession, inst: Instance) -> str:
    async with http.get(f"{inst.url}/metrics", headers=inst.headers()) as resp:
        assert resp.status == 200
        return await resp.text()


def assert_well_formed(buckets: list[tuple[float, float]], count: float) -> None:
    assert buckets and buckets[-1][0] == math.inf
    counts = [c for _, c in buckets]
    assert counts == sorted(counts), buckets  # cumulative
    assert counts[-1] == count


async def test_tasks_that_fail_routing_are_counted_as_finished(
    swarm: Swarm, http: aiohttp.ClientSession
) -> None:
    # Regression (issue 23): 7 tasks failed routing and the metric said 1.
    home = await swarm.start("home")
    bodies = [{"task": "x", "skill": "nope"}] * 3 + \
             [{"task": "x", "capabilities_needed": ["unheard.of"]}] * 4 + \
             [{"task": "x", "skill": "echo"}]
    codes = []
    for body in bodies:
        status, task = await post_task(home, body)
        assert status == 200, task
        codes.append(task["error"]["code"] if task.get("error") else task["state"])
    assert codes == ["unknown_skill"] * 3 + ["no_capable_skill"] * 4 + ["completed"]
    samples = parse(await scrape(http, home))
    assert value(samples, "butler_tasks_finished_total", state="failed") == 7
    assert value(samples, "butler_tasks_finished_total", state="completed") == 1
    buckets, _, count = histogram(samples, "butler_task_duration_seconds", skill="none")
    assert count == 7
    assert_well_formed(buckets, count)
    buckets, total, count = histogram(samples, "butler_task_duration_seconds", skill="echo")
    assert count == 1 and total >= 0
    assert_well_formed(buckets, count)
    buckets, _, count = histogram(samples, "butler_http_request_duration_seconds",
                                  route="POST /v2/tasks")
    assert count == 8
    assert_well_formed(buckets, count)


async def test_request_histograms_are_labelled_by_route_template_not_path(
    swarm: Swarm, http: aiohttp.ClientSession
) -> None:
    home = await swarm.start("home")
    for n in range(3):
        async with http.get(f"{home.url}/v2/tasks/no-such-{n}", headers=home.headers()) as r:
            assert r.status == 404
    samples = parse(await scrape(http, home))
    routes = {dict(labels)["route"] for name, labels in samples
              if name == "butler_http_request_duration_seconds_count"}
    assert "GET /v2/tasks/{id}" in routes, routes
    assert not any("no-such" in route for route in routes)


async def test_delegations_are_timed_per_peer_and_logged_with_the_peer(
    mesh: Mesh, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    mesh.agent("home", skills=[])
    mesh.agent("office", skills=[skill("memory.search")])
    mesh.link("home", "office", ["memory.search"])
    agents = await mesh.start()
    home = agents["home"]
    with caplog.at_level(logging.INFO, logger="butler.tasks"):
        status, task = await post_task(home, {"task": "find", "capabilities_needed":
                                              ["memory.search"]})
        assert status == 200 and task["state"] == "completed", task
    samples = parse(await scrape(http, home))
    buckets, total, count = histogram(samples, "butler_delegation_duration_seconds",
                                      peer="office")
    assert count == 1 and total > 0
    assert_well_formed(buckets, count)
    _, _, count = histogram(samples, "butler_task_duration_seconds", skill="a2a.delegate")
    assert count == 1
    finished = [r for r in caplog.records
                if r.name == "butler.tasks" and r.getMessage() == "task finished"
                and getattr(r, "kv", {}).get("peer") == "office"]
    assert len(finished) == 1
    assert finished[0].kv["skill"] == "a2a.delegate"  # type: ignore[attr-defined]


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    registry = Registry()
    hist = registry.histogram("x_seconds", "help", ("route",))
    for seconds in (0.001, 0.002, 0.5, 1000.0):
        hist.observe("GET /a", value=seconds)
    samples = parse(registry.render())
    buckets, total, count = histogram(samples, "x_seconds", route="GET /a")
    assert dict(buckets)[0.001] == 1  # le is "less than or equal"
    assert dict(buckets)[0.005] == 2
    assert dict(buckets)[0.5] == 3
    assert dict(buckets)[300.0] == 3 and dict(buckets)[math.inf] == 4
    assert count == 4 and total == pytest.approx(1000.503)
    assert "# TYPE x_seconds histogram" in registry.render()


async def test_build_process_and_running_tasks_metrics(
    swarm: Swarm, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    home = await swarm.start("home", skills=[gated_skill("hold", gate)])
    status, task = await post_task(home, {"task": "x", "skill": "hold", "mode": "async"})
    assert status in (200, 202), task
    samples = parse(await scrape(http, home))
    assert value(samples, "butler_tasks_running", state="working") == 1
    idle = ("butler_tasks_running", frozenset({("state", "input-required")}))
    assert samples[idle] == 0  # every state is exported, 0 included
    build = [labels for (name, labels) in samples if name == "butler_build_info"]
    assert len(build) == 1 and {k for k, _ in build[0]} == {"version", "python"}
    assert value(samples, "process_cpu_seconds_total") > 0
    assert value(samples, "process_resident_memory_bytes") > 1_000_000
    assert 3 <= value(samples, "process_open_fds") <= value(samples, "process_max_fds")
    started = value(samples, "process_start_time_seconds")
    assert started <= time.time() and started > time.time() - 24 * 3600
    text = await scrape(http, home)
    assert "# TYPE process_cpu_seconds_total counter" in text

    gate.touch()
    await wait_task(home, task["id"])
    samples = parse(await scrape(http, home))
    assert samples[("butler_tasks_running", frozenset({("state", "working")}))] == 0
