"""Structured logs: JSON lines or key=value, with the trace id on lines about a task."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import aiohttp
import pytest

from tests.support import (
    ECHO,
    ServeProcess,
    Swarm,
    config_dict,
    plugin_skill,
    post_task,
    wait_task,
    write_config,
)


@pytest.mark.parametrize("fmt", ["json", "kv"])
async def test_lines_about_a_task_carry_its_trace_id(
    tmp_path: Path, http: aiohttp.ClientSession, fmt: str
) -> None:
    cfg, tokens = config_dict(tmp_path, "home", skills=[
        ECHO, plugin_skill("explode", "tests.plugins.sample:explode")],
        extra={"logging": {"format": fmt, "level": "info"}})
    server = await ServeProcess.start(write_config(tmp_path, "home", cfg), tmp_path / "log")
    try:
        async with http.post(f"{server.url}/v2/tasks", json={"task": "x", "skill": "explode"},
                             headers={"Authorization": f"Bearer {tokens['operator']}"}) as r:
            task = await r.json()
        assert task["state"] == "failed"
    finally:
        assert await server.stop() == 0
    trace_id = task["swarm"]["trace_id"]
    lines = (tmp_path / "log").read_text().splitlines()
    about = [line for line in lines if "raised on task" in line]
    assert about, lines
    if fmt == "json":
        records = [json.loads(line) for line in lines]
        assert all({"ts", "level", "logger", "msg"} <= set(r) for r in records)
        record = json.loads(about[0])
        assert record["trace_id"] == trace_id and record["level"] == "error"
    else:
        assert all(line.startswith("ts=") and " level=" in line for line in lines)
        assert f"trace_id={trace_id}" in about[0]
    assert tokens["operator"] not in "\n".join(lines)


async def test_a_task_logs_when_it_starts_and_ends_with_typed_fields(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    cfg, tokens = config_dict(tmp_path, "home", extra={
        "logging": {"format": "json", "level": "debug"}})
    server = await ServeProcess.start(write_config(tmp_path, "home", cfg), tmp_path / "log")
    try:
        async with http.post(f"{server.url}/v2/tasks", json={"task": "x", "skill": "echo"},
                             headers={"Authorization": f"Bearer {tokens['operator']}"}) as r:
            task = await r.json()
    finally:
        assert await server.stop() == 0
    trace_id = task["swarm"]["trace_id"]
    records = [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]
    started, = [r for r in records if r["msg"] == "task started"]
    finished, = [r for r in records if r["msg"] == "task finished"]
    assert records.index(started) < records.index(finished)
    for record in (started, finished):
        assert record["task_id"] == task["id"] and record["trace_id"] == trace_id
        assert record["caller"] == "operator" and record["skill"] == "echo"
    # Numbers are numbers: a log pipeline can sum and compare them without parsing.
    assert isinstance(finished["duration_ms"], float) and finished["cost_usd"] == 0
    request, = [r for r in records if r["msg"] == "request" and r["method"] == "POST"]
    assert request["status"] == 200 and isinstance(request["duration_ms"], float)


async def test_a_delegation_logs_the_peer_it_goes_to(
    swarm: Swarm, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    office = await swarm.start("office", callers={"home": {}})
    token_file = tmp_path / "office.token"
    token_file.write_text(office.tokens["home"])
    home = await swarm.start("home", skills=[], peers=[{
        "name": "office", "url": office.url, "token_file": str(token_file),
        "capabilities": ["echo"]}])
    caplog.set_level(logging.INFO, logger="butler.tasks")
    _, task = await post_task(home, {"task": "x", "capabilities_needed": ["echo"]})
    await wait_task(home, task["id"])
    started = [r for r in caplog.records if r.getMessage() == "task started"
               and getattr(r, "kv", {}).get("task_id") == task["id"]]
    assert len(started) == 1
    kv = getattr(started[0], "kv", {})
    assert kv["peer"] == "office" and kv["skill"] == "a2a.delegate"
    assert getattr(started[0], "trace_id", "") == task["swarm"]["trace_id"]
