#!/usr/bin/env python3
"""Storage at scale: ``.venv/bin/python bench/storage.py [--sizes 10000,100000,1000000]``.

For each size N, builds a data folder holding N finished one-word echo tasks, each with
its signed receipt, and their audit records (two per task), written through the stores'
own encodings and schema (``task_document.task_row``, ``append_entries``) in bulk transactions, not
through HTTP. Then measures:

- bytes per task: ``tasks.db`` and ``audit.db`` (checkpointed) divided by N;
- every listing the API and CLI offer (owner, state, context, time range, their
  combinations, first page and a later page) through ``SqliteTaskStore.list_tasks``,
  in-process: median and p99 over ``--runs`` queries each, in milliseconds;
- restart to listening: ``butler serve`` on that folder, from spawn until its port
  accepts a connection (the median of ``--restarts`` starts; the first also fails the
  1 % of tasks left open, as after a crash), and on an empty folder for comparison
  (first: its start writes the bytecode cache the others start from).

The tasks: ten callers, 99 % completed and the rest spread over the other states, four
tasks per context, update times spread over the 30 days before now. ``--keep`` leaves
the folders in ``--work`` (default ``bench/work/storage``) and reuses them next time.
docs/performance.md has the latest numbers, bench/HISTORY.md ("Storage at scale") the
earlier ones and what each change did to them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from butler.audit.log import AuditLog, append_entries  # noqa: E402
from butler.audit.record import Entry  # noqa: E402
from butler.engine.outcome import final_detail  # noqa: E402
from butler.engine.store import SqliteTaskStore  # noqa: E402
from butler.engine.task_document import micros_stamp, task_row  # noqa: E402
from butler.engine.task_schema import UPSERT, create_schema  # noqa: E402
from butler.identity.key_file import AgentIdentity  # noqa: E402
from butler.identity.receipts import seal  # noqa: E402
from internal.protocol.a2a.model import (  # noqa: E402
    Budget,
    CostNode,
    Part,
    StatusEntry,
    Task,
    TaskRequest,
    TaskState,
)
from internal.signing import IdentityKey  # noqa: E402

CALLERS = [f"caller-{i}" for i in range(10)]
PER_CONTEXT = 4
SPAN_MICROS = 30 * 86400 * 1_000_000
CHUNK = 20_000


def _state(rng: random.Random) -> TaskState:
    roll = rng.random()
    if roll < 0.99:
        return TaskState.COMPLETED
    return rng.choice([s for s in TaskState if s is not TaskState.COMPLETED])


def echo_task(i: int, n: int, now: int, rng: random.Random,
              identity: AgentIdentity) -> Task:
    """The i-th of n tasks: as the daemon stores a finished echo of one word, with its
    signed receipt."""
    updated = now - SPAN_MICROS + (SPAN_MICROS * i) // n
    created = updated - rng.randrange(200, 900)
    state = _state(rng)
    owner = CALLERS[i % len(CALLERS)]
    stamp, start = micros_stamp(updated), micros_stamp(created)
    return seal(Task(
        id=f"{created // 1000:012x}{rng.getrandbits(80):020x}",
        context_id=f"{created // 1000:012x}{(i // PER_CONTEXT):020x}",
        owner=owner, state=state, request=TaskRequest(text="hello", skill="echo"),
        created_at=start, updated_at=stamp, skill="echo",
        history=(StatusEntry(TaskState.SUBMITTED, start), StatusEntry(TaskState.WORKING, start),
                 StatusEntry(state, stamp)),
        parts=(Part(text="hello"),), budget=Budget(Decimal("5.00")),
        cost=CostNode("bench", "echo", Decimal("0"), 0, state.value), chain=(owner,),
        trace_id=f"{rng.getrandbits(128):032x}"), identity, "bench", "http://127.0.0.1:8081").task


def _audit_entries(task: Task) -> list[tuple[Entry, str]]:
    base = {"caller": task.owner, "task_id": task.id, "chain": [task.owner],
            "trace_id": task.trace_id}
    return [
        (Entry(kind="inbound", budget_before=Decimal("5.00"), budget_after=None,
               decision="accepted", **base), task.created_at.replace("Z", "+00:00")),
        (Entry(kind="task_finished", budget_before=Decimal("5.00"),
               budget_after=Decimal("5.00"), decision=task.state.value,
               detail=final_detail(task), **base),
         task.updated_at.replace("Z", "+00:00")),
    ]


def build(folder: Path, n: int) -> None:
    """tasks.db and audit.db for n tasks, unless a finished build is there."""
    if (folder / "built").exists():
        return
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = random.Random(n)
    now = time.time_ns() // 1000
    tasks = sqlite3.connect(folder / "tasks.db", isolation_level=None)
    tasks.execute("PRAGMA journal_mode=WAL")
    create_schema(tasks)
    audit = AuditLog(folder / "audit.db")
    identity = AgentIdentity(IdentityKey.generate())
    try:
        for start in range(0, n, CHUNK):
            batch = [echo_task(i, n, now, rng, identity)
                     for i in range(start, min(n, start + CHUNK))]
            tasks.execute("BEGIN")
            tasks.executemany(UPSERT, [task_row(t) for t in batch])
            tasks.execute("COMMIT")
            pairs = [pair for t in batch for pair in _audit_entries(t)]
            audit.db.call(append_entries, [e for e, _ in pairs], [at for _, at in pairs],
                          write=True)
        tasks.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        audit.db.call(lambda conn: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())
    finally:
        tasks.close()
        audit.close()
    (folder / "built").write_text(str(n))


def sizes(folder: Path, n: int) -> dict[str, float]:
    def size(name: str) -> int:
        return sum(p.stat().st_size for p in folder.glob(name + "*"))
    return {"tasks_bytes_per_task": size("tasks.db") / n,
            "audit_bytes_per_task": size("audit.db") / n,
            "bytes_per_task": (size("tasks.db") + size("audit.db")) / n}


CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("newest (admin)", {}, False),
    ("caller", {"owner": "caller-3"}, False),
    ("state=working (admin)", {"state": TaskState.WORKING}, False),
    ("caller + state=working", {"owner": "caller-3", "state": TaskState.WORKING}, False),
    ("caller + state=completed", {"owner": "caller-3", "state": TaskState.COMPLETED}, False),
    ("context", {"context": True}, False),
    ("caller + context", {"owner": "caller-3", "context": True}, False),
    ("by update + total (A2A, admin)", {}, True),
    ("caller, by update + total (A2A)", {"owner": "caller-3"}, True),
    ("caller + state, by update + total", {"owner": "caller-3",
                                           "state": TaskState.COMPLETED}, True),
    ("caller + last hour, by update + total", {"owner": "caller-3", "hour": True}, True),
    ("state + last hour, by update + total", {"state": TaskState.COMPLETED,
                                              "hour": True}, True),
]


async def listings(folder: Path, runs: int) -> dict[str, dict[str, float]]:
    store = await SqliteTaskStore.open(folder / "tasks.db")
    out: dict[str, dict[str, float]] = {}
    try:
        newest = await store.list_tasks(owner=None, state=None, context_id=None,
                                        cursor=None, limit=100)
        context = newest.tasks[len(newest.tasks) // 2].context_id
        hour = micros_stamp(time.time_ns() // 1000 - 3600 * 1_000_000)
        for name, case, by_update in CASES:
            query = {"owner": case.get("owner"), "state": case.get("state"),
                     "context_id": context if case.get("context") else None,
                     "updated_after": hour if case.get("hour") else None,
                     "by_update": by_update, "limit": 100}
            timings: list[float] = []
            cursor = None
            for i in range(runs):
                began = time.perf_counter()
                page = await store.list_tasks(cursor=cursor, **query)
                timings.append((time.perf_counter() - began) * 1000)
                cursor = page.next_cursor if i % 2 == 0 else None  # first and next pages
            timings.sort()
            out[name] = {"p50_ms": round(statistics.median(timings), 2),
                         "p99_ms": round(timings[int(len(timings) * 0.99) - 1], 2),
                         "rows": len(page.tasks)}
    finally:
        await store.close()
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# As an installed daemon starts: from compiled bytecode. A shell that sets
# PYTHONDONTWRITEBYTECODE would have every start compile Butler's modules from source
# (about 0.7 s of a start on the shared VM).
_INSTALLED = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def restart(folder: Path, times: int) -> float:
    """Median seconds from spawning ``butler serve`` on ``folder`` to its port accepting."""
    took: list[float] = []
    for _ in range(times):
        port = _free_port()
        config = folder / "bench.yaml"
        config.write_text(json.dumps({
            "agent": {"id": "bench", "name": "Bench", "description": "storage bench"},
            "data_dir": str(folder),
            "configurations": {"a2a": {"enabled": True, "port": port,
                                       "bind_address": "127.0.0.1",
                                       "token_hashes": [{"sha256": "0" * 64,
                                                         "name": "operator"}]}},
            "logging": {"level": "warning"},
            "skills": [{"id": "echo", "builtin": "echo", "expose": True}],
        }))
        began = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "butler", "serve", "-c", str(config)],
                                cwd=ROOT, stdout=subprocess.DEVNULL, env=_INSTALLED,
                                stderr=open(folder / "serve.log", "ab"))  # noqa: SIM115
        try:
            deadline = began + 120
            while time.perf_counter() < deadline:
                if proc.poll() is not None:
                    raise SystemExit(f"butler serve exited: see {folder / 'serve.log'}")
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        break
                except OSError:
                    time.sleep(0.005)
            took.append(time.perf_counter() - began)
        finally:
            proc.terminate()
            proc.wait(30)
    return statistics.median(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "storage")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    empty = args.work / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    print(f"restart to listening, empty data folder: {restart(empty, args.restarts):.2f} s "
          "(the process's own start-up, for comparison)", flush=True)
    results: dict[str, Any] = {}
    for n in (int(s) for s in args.sizes.split(",")):
        folder = args.work / f"{n}"
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
        began = time.perf_counter()
        build(folder, n)
        row: dict[str, Any] = {"build_seconds": round(time.perf_counter() - began, 1)}
        row.update({k: round(v) for k, v in sizes(folder, n).items()})
        row["listings"] = asyncio.run(listings(folder, args.runs))
        row["restart_seconds"] = round(restart(folder, args.restarts), 2)
        results[str(n)] = row
        print(json.dumps({n: row}, indent=1), flush=True)
    print(_table(results))


def _table(results: dict[str, Any]) -> str:
    sizes_ = list(results)
    lines = ["| | " + " | ".join(f"{int(n):,} tasks" for n in sizes_) + " |",
             "|---|" + "---|" * len(sizes_)]
    for key in ("bytes_per_task", "tasks_bytes_per_task", "audit_bytes_per_task"):
        lines.append(f"| {key.replace('_', ' ')} (B) | "
                     + " | ".join(str(results[n][key]) for n in sizes_) + " |")
    for name, _, _ in CASES:
        lines.append(f"| {name}: p50 / p99 ms | " + " | ".join(
            f"{results[n]['listings'][name]['p50_ms']} / {results[n]['listings'][name]['p99_ms']}"
            for n in sizes_) + " |")
    lines.append("| restart to listening (s) | "
                 + " | ".join(str(results[n]["restart_seconds"]) for n in sizes_) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
