"""Durable task storage: an interface and its SQLite (WAL) implementation.

A write returns only after its transaction committed, so a task the daemon has
acknowledged survives a kill -9. Calls run on one worker thread that owns the
connection, keeping the event loop free.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from internal.protocol.a2a import jsonwire, rest_codec
from internal.protocol.a2a.errors import RequestError
from internal.protocol.a2a.types import Task, TaskPage, TaskState

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    context_id TEXT NOT NULL,
    state TEXT NOT NULL,
    terminal INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_owner ON tasks(owner, seq);
CREATE INDEX IF NOT EXISTS tasks_context ON tasks(context_id, seq);
CREATE INDEX IF NOT EXISTS tasks_open ON tasks(terminal, updated_at);
"""


class TaskStore(Protocol):
    async def put(self, task: Task) -> None: ...
    async def get(self, task_id: str) -> Task | None: ...
    async def list_tasks(
        self, *, owner: str | None, state: TaskState | None, context_id: str | None,
        cursor: str | None, limit: int,
    ) -> TaskPage: ...
    async def open_tasks(self) -> list[Task]: ...
    async def purge_terminal(self, updated_before: str) -> int: ...
    async def close(self) -> None: ...


def encode_row(task: Task) -> str:
    return jsonwire.dumps({
        "task": rest_codec.encode_task(task),
        "owner": task.owner,
        "request": rest_codec.encode_request(task.request),
    })


def decode_row(body: str) -> Task:
    data = jsonwire.loads(body, max_depth=256)
    task = rest_codec.decode_task(data["task"])
    request = rest_codec.decode_task_request(data["request"])
    return replace(task, owner=data["owner"], request=request)


class SqliteTaskStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="task-store")
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode survives a process crash (kill -9); only an OS crash or
        # power loss can roll back the last transactions. See docs/tasks.md.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def put(self, task: Task) -> None:
        await self._run(self._put, task)

    def _put(self, task: Task) -> None:
        self._db.execute(
            "INSERT INTO tasks(id, owner, context_id, state, terminal, updated_at, body) "
            "VALUES (?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET state=excluded.state, "
            "terminal=excluded.terminal, updated_at=excluded.updated_at, body=excluded.body",
            (task.id, task.owner, task.context_id, task.state.value, int(task.state.terminal),
             task.updated_at, encode_row(task)),
        )

    async def get(self, task_id: str) -> Task | None:
        row = await self._run(
            lambda: self._db.execute("SELECT body FROM tasks WHERE id=?", (task_id,)).fetchone()
        )
        return decode_row(row[0]) if row else None

    async def list_tasks(
        self, *, owner: str | None, state: TaskState | None, context_id: str | None,
        cursor: str | None, limit: int,
    ) -> TaskPage:
        where: list[str] = []
        args: list[Any] = []
        if owner is not None:
            where.append("owner=?")
            args.append(owner)
        if state is not None:
            where.append("state=?")
            args.append(state.value)
        if context_id is not None:
            where.append("context_id=?")
            args.append(context_id)
        if cursor is not None:
            where.append("seq<?")
            args.append(_decode_cursor(cursor))
        sql = "SELECT seq, body FROM tasks"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq DESC LIMIT ?"
        args.append(limit + 1)
        rows = await self._run(lambda: self._db.execute(sql, args).fetchall())
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = _encode_cursor(rows[-1][0]) if more and rows else None
        return TaskPage(tuple(decode_row(r[1]) for r in rows), next_cursor)

    async def open_tasks(self) -> list[Task]:
        rows = await self._run(
            lambda: self._db.execute("SELECT body FROM tasks WHERE terminal=0").fetchall()
        )
        return [decode_row(r[0]) for r in rows]

    async def purge_terminal(self, updated_before: str) -> int:
        def purge() -> int:
            cur = self._db.execute(
                "DELETE FROM tasks WHERE terminal=1 AND updated_at<?", (updated_before,)
            )
            return cur.rowcount

        return int(await self._run(purge))

    async def close(self) -> None:
        await self._run(self._db.close)
        self._pool.shutdown(wait=True)


def _encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"s": seq}).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> int:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        seq = json.loads(base64.urlsafe_b64decode(padded))["s"]
    except (ValueError, KeyError, TypeError):
        raise RequestError("invalid_params", "invalid cursor") from None
    if not isinstance(seq, int):
        raise RequestError("invalid_params", "invalid cursor")
    return seq
