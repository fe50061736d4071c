"""Structured logs: JSON lines or key=value, with the trace id on lines about a task."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from tests.support import ECHO, ServeProcess, config_dict, plugin_skill, write_config


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
