"""Durable tasks: SQLite WAL, kill -9 and restart, idempotent submits, retention purge."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import sys
from pathlib import Path

import aiohttp

from butler.identity.receipts import receipt_claims
from tests.support import (
    ECHO,
    TERMINAL,
    ServeProcess,
    Swarm,
    call,
    command_skill,
    config_dict,
    kill_quietly,
    plugin_skill,
    post_task,
    wait_task,
    wait_until,
    write_config,
)

# Writes its pid to DIR/<task id>.pid, then sleeps: a task still running at the crash.
SLEEPER = ("import json, os, sys, time\n"
           "task = json.load(sys.stdin)\n"
           "pid_file = os.path.join(sys.argv[1], task['task_id'] + '.pid')\n"
           "open(pid_file, 'w').write(str(os.getpid()))\n"
           "time.sleep(30)\n")
# Appends one line per run to a file: proves whether a task ran again.
APPENDER = ("import json, sys\n"
            "task = json.load(sys.stdin)\n"
            "open(sys.argv[1], 'a').write(task['task_id'] + '\\n')\n"
            "print('ran ' + task['task_id'])\n")


async def test_kill_9_then_restart(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    cfg, tokens = config_dict(tmp_path, "home", skills=[
        ECHO, command_skill("nap", [sys.executable, str(tmp_path / "sleeper.py"), str(pids)]),
    ])
    path = write_config(tmp_path, "home", cfg)
    headers = {"Authorization": f"Bearer {tokens['operator']}"}

    async def submit(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
        async with http.post(f"{url}/v2/tasks", json=body, headers=headers) as resp:
            return resp.status, await resp.json()

    daemon = await ServeProcess.start(path, tmp_path / "daemon.log")
    try:
        status, done = await submit(daemon.url, {"task": "before", "skill": "echo"})
        assert status == 200 and done["state"] == "completed"
        answers = await asyncio.gather(*(
            submit(daemon.url, {"id": f"nap-{i}", "task": "sleep", "skill": "nap",
                                "mode": "async"}) for i in range(4)))
        answers += await asyncio.gather(*(
            submit(daemon.url, {"task": f"quick {i}", "skill": "echo", "mode": "async"})
            for i in range(6)))
        assert [s for s, _ in answers] == [202] * 10
        await wait_until(lambda: len(list(pids.glob("*.pid"))) == 4, 15, "4 commands running")
        await daemon.kill9()
    finally:
        await daemon.kill9()
        # Commands run in their own session, so they outlive a kill -9 of the daemon.
        for pid_file in pids.glob("*.pid"):
            if pid_file.read_text():
                kill_quietly(int(pid_file.read_text()))

    db = sqlite3.connect(cfg["data_dir"] + "/tasks.db")
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()

    daemon = await ServeProcess.start(path, tmp_path / "daemon.log")
    try:
        for _, acked in answers:
            async with http.get(f"{daemon.url}/v2/tasks/{acked['id']}", headers=headers) as r:
                assert r.status == 200
                task = await r.json()
            assert task["state"] in TERMINAL
            if task["skill"] == "nap":
                assert task["state"] == "failed"
                assert task["error"]["code"] == "interrupted_by_restart"
                assert task["history"][-1]["state"] == "failed"
            # Every task ends with a signed receipt, those the restart ended too.
            assert receipt_claims(task["receipts"][0])["state"] == task["state"]
        async with http.get(f"{daemon.url}/v2/tasks/{done['id']}", headers=headers) as r:
            assert (await r.json())["state"] == "completed"
        async with http.get(f"{daemon.url}/v2/tasks?limit=200", headers=headers) as r:
            listed = (await r.json())["tasks"]
        assert len(listed) == 11
        assert not [t for t in listed if t["state"] not in TERMINAL]
    finally:
        assert await daemon.stop() == 0
    # The four naps, and any quick task the kill caught before it finished.
    marked = re.search(r"marked (\d+) interrupted task\(s\) failed after restart",
                       (tmp_path / "daemon.log").read_text())
    assert marked is not None and 4 <= int(marked.group(1)) <= 10


async def test_same_id_runs_once(swarm: Swarm, tmp_path: Path) -> None:
    (tmp_path / "appender.py").write_text(APPENDER)
    ran = tmp_path / "ran.txt"
    home = await swarm.start("home", callers={"operator": {}, "alice": {}}, skills=[
        command_skill("append", [sys.executable, str(tmp_path / "appender.py"), str(ran)])])
    body = {"id": "once", "task": "x", "skill": "append"}
    status, first = await post_task(home, body)
    assert status == 200 and first["output"] == "ran once"
    status, second = await post_task(home, body)
    assert status == 200 and second == first
    # Async and concurrent repeats get the stored task too.
    status, third = await post_task(home, {**body, "mode": "async"})
    assert status == 202 and third == first
    for i in range(5):
        together = await asyncio.gather(*(post_task(home, {"id": f"race-{i}", "task": "y",
                                                           "skill": "append"})
                                          for _ in range(4)))
        assert {t["output"] for _, t in together} == {f"ran race-{i}"}
    ran_ids = ["once"] + [f"race-{i}" for i in range(5)]
    assert ran.read_text().splitlines() == ran_ids
    # Ids are scoped per caller: alice's "once" is a task of her own, run once, and
    # nothing in the answers tells her that operator has an "once" too.
    status, hers = await post_task(home, body, who="alice")
    assert status == 200 and hers["id"] == "once" and hers["context_id"] != first["context_id"]
    status, again_hers = await post_task(home, body, who="alice")
    assert status == 200 and again_hers == hers
    status, got = await call(home, "GET", "/v2/tasks/once", who="alice")
    assert status == 200 and got == hers
    status, got = await call(home, "GET", "/v2/tasks/once")
    assert status == 200 and got == first
    *before, alices = ran.read_text().splitlines()
    # The skill sees the id the task is stored under: unique on this instance.
    assert before == ran_ids and alices.startswith("once~")
    ran_ids.append(alices)

    # Across a restart on the same data dir, too.
    await swarm.stop(home)
    home = await swarm.start("home", callers={"operator": {}, "alice": {}}, skills=[
        command_skill("append", [sys.executable, str(tmp_path / "appender.py"), str(ran)])])
    status, again = await post_task(home, body)
    assert status == 200 and again == first
    status, again_hers = await post_task(home, body, who="alice")
    assert status == 200 and again_hers == hers
    assert ran.read_text().splitlines() == ran_ids


async def test_idempotent_while_running(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[plugin_skill("ask", "tests.plugins.sample:ask_name")])
    _, first = await post_task(home, {"id": "ask-1", "task": "x", "skill": "ask"})
    assert first["state"] == "input-required"
    _, again = await post_task(home, {"id": "ask-1", "task": "x", "skill": "ask"})
    assert again["id"] == "ask-1" and again["state"] == "input-required"
    _, done = await call(home, "POST", "/v2/tasks/ask-1/input", body={"task": "Ada"})
    assert done["output"] == "hello Ada"
    _, page = await call(home, "GET", "/v2/tasks")
    assert len(page["tasks"]) == 1


async def test_retention_purges_terminal_tasks(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[
        ECHO, plugin_skill("ask", "tests.plugins.sample:ask_name")],
        extra={"tasks": {"retention_hours": 0.0002}})  # 0.72 s
    _, done = await post_task(home, {"task": "short-lived", "skill": "echo"})
    _, waiting = await post_task(home, {"task": "x", "skill": "ask"})
    assert waiting["state"] == "input-required"
    async def purged() -> bool:
        return (await call(home, "GET", f"/v2/tasks/{done['id']}"))[0] == 404

    await wait_until(purged, what="the finished task purged")
    # Only terminal tasks are purged; one waiting for its caller stays.
    status, task = await call(home, "GET", f"/v2/tasks/{waiting['id']}")
    assert status == 200 and task["state"] == "input-required"
    await call(home, "POST", f"/v2/tasks/{waiting['id']}/cancel")
    await wait_task(home, waiting["id"], {"canceled"})
