"""Crash safety: kill -9 a real daemon under concurrent load, restart it, check the store.

Each cycle: a client keeps 16 submissions in flight (blocking and async; echo, a command
that appends its task id to a file, memory.write), every one with its own client-chosen
id. At a random moment the daemon gets SIGKILL. A copy of its data files is checked
(``PRAGMA integrity_check`` on every database, ``butler audit verify``), the daemon is
restarted on the same port and files, and the client resubmits every id it got no 2xx
for, with the same id and body. Then:

- every acknowledged id exists and is terminal. One that was still running at the kill is
  ``failed`` with ``interrupted_by_restart``; one acknowledged as finished is unchanged;
- nothing is left non-terminal, and no task exists that the client did not submit;
- no id ran twice: one task row per id, the command's file names each id at most once
  (exactly once for a completed command task), and a resubmitted id that was already
  stored answers with the stored task and does not run again.

The guarantee, precisely: a task id is run at most once, across crashes and client
retries. A task cut off by the crash is not resumed or re-run (it may have done part of
its work); it ends ``failed`` with ``interrupted_by_restart``.

``BUTLER_CRASH_CYCLES`` sets the number of cycles (default 3), ``BUTLER_CRASH_SEED`` the
random seed; see docs/operations.md for the long run.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import itertools
import os
import random
import re
import shutil
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from butler.cli import main as butler_main
from butler.runtime.clock import now_iso
from tests.audit_support import documented_rows
from tests.delegation_support import free_port
from tests.support import (
    ECHO,
    TERMINAL,
    ServeProcess,
    command_skill,
    config_dict,
    wait_until,
    write_config,
)

CYCLES = int(os.environ.get("BUTLER_CRASH_CYCLES", "3"))
SEED = int(os.environ.get("BUTLER_CRASH_SEED", str(random.SystemRandom().randrange(2**32))))
CONCURRENCY = 16
DATABASES = ("tasks.db", "audit.db", "memory.db", "workspace.db")

# Appends its task id to a file (proof of a run), then naps as asked: some runs are cut off.
APPENDER = ("import json, sys, time\n"
            "task = json.load(sys.stdin)\n"
            "with open(sys.argv[1], 'a') as out:\n"
            "    out.write(task['task_id'] + '\\n')\n"
            "time.sleep(task['input'].get('nap_ms', 0) / 1000)\n"
            "print('ran ' + task['task_id'])\n")


@dataclass
class Ledger:
    """What the client knows: every body it sent, and what each 2xx said."""

    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    acked: dict[str, dict[str, Any]] = field(default_factory=dict)

    def unacked(self) -> list[str]:
        return [i for i in self.bodies if i not in self.acked]


def body_for(task_id: str, rng: random.Random) -> dict[str, Any]:
    body: dict[str, Any] = {"id": task_id, "task": f"crash test {task_id}",
                            "mode": rng.choice(["blocking", "async"])}
    kind = rng.choice(["echo", "append", "append", "memory"])
    if kind == "append":
        # Whole milliseconds: a JSON fraction would reach the command as a string.
        body.update(skill="append", input={"nap_ms": rng.choice([0, 0, 100, 500])})
    elif kind == "memory":
        body.update(skill="memory.write", input={"key": task_id})
    else:
        body["skill"] = "echo"
    return body


async def submit(http: aiohttp.ClientSession, url: str, headers: dict[str, str],
                 body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """(status, JSON) of a whole answer, or None when the daemon went away mid-call."""
    try:
        async with http.post(f"{url}/v2/tasks", json=body, headers=headers) as resp:
            return resp.status, await resp.json()
    except (aiohttp.ClientError, ConnectionError, TimeoutError):
        return None


async def load(url: str, headers: dict[str, str], ledger: Ledger, cycle: int,
               rng: random.Random, stop: asyncio.Event) -> None:
    numbers = itertools.count()

    async def worker(http: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            task_id = f"c{cycle}-{next(numbers)}"
            body = ledger.bodies[task_id] = body_for(task_id, rng)
            answer = await submit(http, url, headers, body)
            if answer is None:
                continue
            status, data = answer
            if status in (200, 202):
                assert data["id"] == task_id
                ledger.acked[task_id] = data
            else:  # a rate limit or overload: not acknowledged, so retried after restart
                assert status in (429, 503), (status, data)
                await asyncio.sleep(0.1)  # the client's back-off

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(worker(http) for _ in range(CONCURRENCY)))


def check_files(data_dir: Path, snapshot: Path, config: dict[str, Any], tmp: Path) -> None:
    """The files exactly as the kill left them (copied, so the daemon recovers the
    originals itself): every database passes its integrity check, the audit chain holds."""
    shutil.rmtree(snapshot, ignore_errors=True)
    snapshot.mkdir()
    for name in DATABASES:
        for suffix in ("", "-wal"):
            if (data_dir / (name + suffix)).exists():
                shutil.copy2(data_dir / (name + suffix), snapshot / (name + suffix))
    for name in DATABASES:
        assert (snapshot / name).exists(), name
        db = sqlite3.connect(snapshot / name)
        try:
            assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)], name
        finally:
            db.close()
    verify = write_config(tmp, "snapshot", {**config, "data_dir": str(snapshot)})
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = butler_main(["audit", "verify", "-c", str(verify)])
    assert code == 0 and "audit trail intact" in out.getvalue(), out.getvalue()


async def all_tasks(http: aiohttp.ClientSession, url: str,
                    headers: dict[str, str]) -> dict[str, dict[str, Any]]:
    tasks: dict[str, dict[str, Any]] = {}
    cursor = ""
    while True:
        async with http.get(f"{url}/v2/tasks?limit=1000{cursor}", headers=headers) as resp:
            assert resp.status == 200
            page = await resp.json()
        for task in page["tasks"]:
            assert task["id"] not in tasks, f"two tasks with id {task['id']}"
            tasks[task["id"]] = task
        if page["next_cursor"] is None:
            return tasks
        cursor = f"&cursor={page['next_cursor']}"


async def test_kill_9_under_load_loses_nothing_and_runs_nothing_twice(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    why = f"BUTLER_CRASH_SEED={SEED}"
    ran = tmp_path / "ran.txt"
    ran.touch()
    (tmp_path / "appender.py").write_text(APPENDER)
    config, tokens = config_dict(tmp_path, "home", skills=[
        ECHO,
        command_skill("append", [sys.executable, str(tmp_path / "appender.py"), str(ran)]),
        {"id": "memory.write", "builtin": "memory.write", "expose": True},
    ], extra={"tasks": {"max_page_size": 1000}})
    config["configurations"]["a2a"]["port"] = free_port()  # a restart keeps the URL
    path = write_config(tmp_path, "home", config)
    data_dir = Path(config["data_dir"])
    headers = {"Authorization": f"Bearer {tokens['operator']}"}
    ledger = Ledger()
    totals = collections.Counter[str]()

    daemon = await ServeProcess.start(path, tmp_path / "daemon-0.log")
    try:
        for cycle in range(1, CYCLES + 1):
            started, sent_before = time.monotonic(), len(ledger.bodies)
            stop = asyncio.Event()
            loader = asyncio.create_task(load(daemon.url, headers, ledger, cycle, rng, stop))
            await asyncio.sleep(rng.uniform(0.2, 1.2))  # load for a random while, then the kill
            stop.set()  # the calls in flight now are the ones the kill cuts off
            await daemon.kill9()
            killed_at = now_iso()
            await loader
            retries = len(ledger.unacked())

            await asyncio.to_thread(  # the CLI never blocks a loop
                check_files, data_dir, tmp_path / "snapshot", config, tmp_path)
            log_path = tmp_path / f"daemon-{cycle}.log"
            daemon = await ServeProcess.start(path, log_path)
            async with aiohttp.ClientSession() as http:
                retried = await verify_cycle(http, daemon.url, headers, ledger, ran, rng, why)
            await one_final_record_each(data_dir / "audit.db", set(ledger.bodies), why)
            marked = re.search(r"marked (\d+) interrupted task", log_path.read_text())
            stats = {"submitted": len(ledger.bodies) - sent_before, "retried": retries,
                     "retried_found_stored": sum(t["created_at"] < killed_at
                                                 for t in retried.values()),
                     "interrupted": int(marked.group(1)) if marked else 0}
            totals.update(stats)
            # Shown with -s: the numbers docs/operations.md quotes for a long run.
            print(f"cycle {cycle}: {stats}, {time.monotonic() - started:.1f}s")
        print(f"{CYCLES} cycles, {why}: {dict(totals)}")
        async with aiohttp.ClientSession() as http:
            stored = await all_tasks(http, daemon.url, headers)
        failed = [t for t in stored.values() if t["state"] == "failed"]
        assert len(failed) == totals["interrupted"], (
            "every failure is one the start-up log counted as interrupted", why)
    finally:
        await daemon.stop()
    for name in DATABASES:  # and once more after a clean stop
        db = sqlite3.connect(data_dir / name)
        try:
            assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)], name
        finally:
            db.close()


async def one_final_record_each(audit_db: Path, task_ids: set[str], why: str) -> None:
    """Every created task has exactly one final audit record, across every kill so far
    (records lost in the writer's window are written at start-up). The last ones of this
    cycle may still be in the live writer's window: wait for them."""
    def final_records() -> collections.Counter[str]:
        return collections.Counter(r["task_id"] for r in documented_rows(audit_db)
                                   if r["kind"] == "task_finished")

    await wait_until(lambda: set(final_records()) >= task_ids, 20,
                     f"a final record for every task ({why})")
    finals = final_records()
    assert task_ids - set(finals) == set(), ("a final record for every task", why)
    assert set(finals) == task_ids, ("final records only for created tasks", why)
    assert [t for t, n in finals.items() if n > 1] == [], ("one final record each", why)


async def verify_cycle(http: aiohttp.ClientSession, url: str, headers: dict[str, str],
                       ledger: Ledger, ran: Path, rng: random.Random,
                       why: str) -> dict[str, dict[str, Any]]:
    """Checks one restart; returns the answers to the ids it resubmitted."""
    # The client retries what it got no answer for, with the same id and body.
    retried: dict[str, dict[str, Any]] = {}
    for task_id in ledger.unacked():
        answer = await submit(http, url, headers, ledger.bodies[task_id])
        assert answer is not None and answer[0] in (200, 202), (answer, why)
        retried[task_id] = ledger.acked[task_id] = answer[1]
    # Acknowledged ids sent again: the stored task comes back, nothing runs.
    runs_before = ran.read_text().splitlines()
    resent = rng.sample(sorted(set(ledger.acked) - set(retried)),
                        min(5, len(ledger.acked) - len(retried)))
    for task_id in resent:
        answer = await submit(http, url, headers, ledger.bodies[task_id])
        assert answer is not None and answer[0] in (200, 202), (answer, why)
        assert answer[1]["created_at"] == ledger.acked[task_id]["created_at"], why

    async def all_terminal() -> dict[str, dict[str, Any]] | None:
        stored = await all_tasks(http, url, headers)
        return stored if all(t["state"] in TERMINAL for t in stored.values()) else None

    stored: dict[str, dict[str, Any]] = await wait_until(all_terminal, 20)
    assert set(stored) == set(ledger.bodies), ("one task per submitted id, no others", why)
    for task_id, acked in ledger.acked.items():
        task = stored[task_id]
        if acked["state"] in TERMINAL and task_id not in retried:
            assert task["state"] == acked["state"], (task_id, why)
            assert task["updated_at"] == acked["updated_at"], ("a finished task never changes",
                                                               task_id, why)
        if task["state"] == "failed":
            assert task["error"]["code"] == "interrupted_by_restart", (task["error"], why)
        else:
            assert task["state"] == "completed", (task, why)

    runs = collections.Counter(ran.read_text().splitlines())
    twice = [i for i, n in runs.items() if n > 1]
    assert twice == [], ("ran more than once", twice, why)
    for task_id, task in stored.items():
        if task["skill"] == "append" and task["state"] == "completed":
            assert runs[task_id] == 1, (task_id, why)
    for task_id in resent:
        assert runs[task_id] == collections.Counter(runs_before)[task_id], (task_id, why)
    return retried
