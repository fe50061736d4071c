"""What ``butler serve`` logs while it works (issues 23, 39): at info a line per started and
finished task and per refusal, at debug an access line per request; never a token."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from tests.support import ServeProcess, config_dict, write_config


async def run_daemon(tmp_path: Path, http: aiohttp.ClientSession, logging: dict[str, str],
                     bodies: list[dict[str, object]],
                     ) -> tuple[list[str], list[dict[str, Any]], str]:
    """Serve, send ``bodies`` to POST /v2/tasks, stop: (log lines, answers, the token)."""
    cfg, tokens = config_dict(tmp_path, "home", extra={"logging": logging})
    server = await ServeProcess.start(write_config(tmp_path, "home", cfg), tmp_path / "log")
    answers: list[dict[str, Any]] = []
    try:
        for body in bodies:
            async with http.post(f"{server.url}/v2/tasks", json=body, headers={
                    "Authorization": f"Bearer {tokens['operator']}"}) as resp:
                answers.append(await resp.json())
    finally:
        assert await server.stop() == 0
    return (tmp_path / "log").read_text().splitlines(), answers, tokens["operator"]


def kv_line(lines: list[str], *needles: str) -> str:
    found = [line for line in lines if all(n in line for n in needles)]
    assert len(found) == 1, (needles, lines)
    return found[0]


async def test_info_logs_each_finished_task_and_each_refusal_with_its_code(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    lines, answers, token = await run_daemon(tmp_path, http, {"level": "debug"}, [
        {"task": "x", "skill": "echo", "budget": "1.50"},
        {"task": "x", "skill": "nope"},
        {"task": "x", "skill": "echo", "caller_chain": ["mallory"]},  # forged: 403
    ])
    done, failed, _ = answers
    done_line = kv_line(lines, "logger=butler.tasks", 'msg="task finished"',
                        f"task_id={done['id']}")
    for part in ("level=info", 'msg="task finished"', "state=completed", "skill=echo",
                 "duration_ms=", "cost_usd=0", "caller=operator",
                 f"trace_id={done['swarm']['trace_id']}"):
        assert part in done_line, (part, done_line)
    failed_line = kv_line(lines, "logger=butler.tasks", f"task_id={failed['id']}")
    assert "state=failed" in failed_line and "code=unknown_skill" in failed_line
    refused = kv_line(lines, 'msg="task refused"')
    assert "level=info" in refused and "code=chain_mismatch" in refused
    assert "caller=operator" in refused and "depth=1" in refused
    # Debug: one access line per request, named by route and caller, and its answer.
    access = [line for line in lines if "logger=butler.access" in line]
    assert len(access) == 3, access
    assert all("level=debug" in line and "method=POST" in line and "path=/v2/tasks" in line
               and "caller=operator" in line and "duration_ms=" in line for line in access)
    assert sum("status=403" in line for line in access) == 1
    assert token not in "\n".join(lines)
    assert "Bearer" not in "\n".join(lines)


async def test_json_lines_carry_the_task_fields_and_info_has_no_access_lines(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    lines, answers, token = await run_daemon(
        tmp_path, http, {"level": "info", "format": "json"},
        [{"task": "x", "skill": "echo"}])
    records = [json.loads(line) for line in lines]
    assert not [r for r in records if r["logger"] == "butler.access"]
    [finished] = [r for r in records if r["msg"] == "task finished"]
    assert finished["task_id"] == answers[0]["id"]
    assert finished["state"] == "completed" and finished["skill"] == "echo"
    assert finished["caller"] == "operator" and float(finished["duration_ms"]) >= 0
    assert finished["trace_id"] == answers[0]["swarm"]["trace_id"]
    assert token not in "\n".join(lines)
