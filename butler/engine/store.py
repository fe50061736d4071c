"""Durable task storage: an interface and its SQLite (WAL) implementation.

A write returns only after its transaction committed, so a task the daemon has
acknowledged survives a kill -9. Writes are group-committed (``BatchWriter``) and
everything runs on the database's worker thread (``butler.storage``), keeping the event
loop free.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from butler.storage import BatchWriter, CheckpointPolicy, Database
from internal.protocol.a2a.codec import butler_v2, exact_json
from internal.protocol.a2a.model import Message, RequestError, Task, TaskPage, TaskState

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
CREATE INDEX IF NOT EXISTS tasks_owner_updated ON tasks(owner, updated_at, seq);
"""

PURGE_CHUNK = 500
# Task writes are committed by the loop itself (``BatchWriter``'s loop mode), not handed
# to the worker: measured faster (docs/performance.md). Reads run on the worker.
COMMIT_ON_LOOP = True


class TaskStore(Protocol):
    async def put(self, task: Task, defer: float = 0.0) -> None: ...
    async def get(self, task_id: str) -> Task | None: ...
    async def list_tasks(
        self, *, owner: str | None, state: TaskState | None, context_id: str | None,
        cursor: str | None, limit: int, updated_after: str | None = None,
        by_update: bool = False,
    ) -> TaskPage: ...
    async def open_tasks(self) -> list[Task]: ...
    async def ended_since(self, updated_at: str) -> list[Task]: ...
    async def purge_terminal(self, updated_before: str) -> list[str]: ...
    async def close(self) -> None: ...


def encode_row(task: Task) -> str:
    """``{"task": ..., "owner": ..., "request": ..., "messages": ...}``; the task's part is
    the very bytes its answer will carry (``butler_v2.task_json``)."""
    rest: dict[str, Any] = {
        "owner": task.owner,
        "request": butler_v2.encode_request(task.request),
    }
    if task.messages:
        rest["messages"] = [_encode_message(m) for m in task.messages]
    if task.reply_as_message:
        rest["reply_as_message"] = True
    return '{"task":' + butler_v2.task_json(task).decode() + "," + exact_json.dumps(rest)[1:]


def decode_row(body: str) -> Task:
    data = exact_json.loads(body, max_depth=256)
    task = butler_v2.decode_task(data["task"])
    request = butler_v2.decode_task_request(data["request"])
    messages = tuple(_decode_message(m) for m in data.get("messages", ()))
    return replace(task, owner=data["owner"], request=request, messages=messages,
                   reply_as_message=data.get("reply_as_message") is True)


def _encode_message(message: Message) -> dict[str, Any]:
    return {
        "message_id": message.message_id, "role": message.role,
        "parts": [butler_v2.encode_part(p) for p in message.parts],
        "context_id": message.context_id, "task_id": message.task_id,
        "metadata": message.metadata, "extensions": list(message.extensions),
        "reference_task_ids": list(message.reference_task_ids), "at": message.at,
    }


def _decode_message(data: dict[str, Any]) -> Message:
    return Message(
        message_id=data["message_id"], role=data["role"],
        parts=butler_v2.decode_parts(data["parts"]), context_id=data["context_id"],
        task_id=data["task_id"], metadata=data.get("metadata"),
        extensions=tuple(data.get("extensions", ())),
        reference_task_ids=tuple(data.get("reference_task_ids", ())), at=data["at"],
    )


def _create_schema(conn: sqlite3.Connection) -> None:
    conn.executescript(_SCHEMA)


class SqliteTaskStore:
    """``await SqliteTaskStore.open(path)``."""

    def __init__(self, db: Database, checkpoints: CheckpointPolicy,
                 commit_on_loop: bool) -> None:
        self._db = db
        self._writer = BatchWriter(db, _UPSERT, _upsert_args, key=_task_id,
                                   checkpoints=checkpoints, commit_on_loop=commit_on_loop)

    @classmethod
    async def open(cls, path: Path, checkpoints: CheckpointPolicy | None = None,
                   commit_on_loop: bool = COMMIT_ON_LOOP) -> SqliteTaskStore:
        checkpoints = checkpoints or CheckpointPolicy()
        db = await Database.open(path, name="tasks", setup=_create_schema,
                                 pragmas=checkpoints.pragmas())
        return cls(db, checkpoints, commit_on_loop)

    async def put(self, task: Task, defer: float = 0.0) -> None:
        """Returns once the task's row is committed (together with any others queued).
        ``defer``: a first write may wait up to that many seconds for the task's next
        write, which then commits in its place (``BatchWriter.submit``)."""
        await self._writer.submit(task, defer)

    async def get(self, task_id: str) -> Task | None:
        row = await self._db.fetchone("SELECT body FROM tasks WHERE id=?", (task_id,))
        return decode_row(row[0]) if row else None

    async def list_tasks(
        self, *, owner: str | None, state: TaskState | None, context_id: str | None,
        cursor: str | None, limit: int, updated_after: str | None = None,
        by_update: bool = False,
    ) -> TaskPage:
        """Newest first by creation; with ``by_update`` by last update (ties by creation),
        and then with the total number of matching tasks."""
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
        if updated_after is not None:
            where.append("updated_at>=?")
            args.append(updated_after)
        filters, filter_args = list(where), list(args)
        if cursor is not None:
            position = _decode_cursor(cursor, by_update)
            if by_update:
                where.append("(updated_at<? OR (updated_at=? AND seq<?))")
                args += [position[0], position[0], position[1]]
            else:
                where.append("seq<?")
                args.append(position[1])
        order = "updated_at DESC, seq DESC" if by_update else "seq DESC"
        sql = "SELECT seq, updated_at, body FROM tasks"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {order} LIMIT ?"
        args.append(limit + 1)
        count_sql = "SELECT COUNT(*) FROM tasks" + (
            " WHERE " + " AND ".join(filters) if filters else "")

        def query(conn: sqlite3.Connection) -> tuple[list[Any], int | None]:
            rows = conn.execute(sql, args).fetchall()
            total = conn.execute(count_sql, filter_args).fetchone()[0] if by_update else None
            return rows, total

        rows, total = await self._db.run(query)
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = _encode_cursor(rows[-1][0], rows[-1][1] if by_update else None) \
            if more and rows else None
        return TaskPage(tuple(decode_row(r[2]) for r in rows), next_cursor, total)

    async def open_tasks(self) -> list[Task]:
        rows = await self._db.fetchall("SELECT body FROM tasks WHERE terminal=0")
        return [decode_row(r[0]) for r in rows]

    async def ended_since(self, updated_at: str) -> list[Task]:
        """Terminal tasks last updated at or after ``updated_at`` (start-up recovery)."""
        rows = await self._db.fetchall(
            "SELECT body FROM tasks WHERE terminal=1 AND updated_at>=?", (updated_at,))
        return [decode_row(r[0]) for r in rows]

    async def purge_terminal(self, updated_before: str) -> list[str]:
        """Delete terminal tasks last updated before then; returns their ids.

        In chunks, each its own short transaction, so task writes queued meanwhile are
        committed between them rather than after one long delete."""
        purged: list[str] = []
        while True:
            rows = await self._db.transaction(_purge_chunk, updated_before)
            purged += rows
            if len(rows) < PURGE_CHUNK:
                return purged

    async def close(self) -> None:
        await self._writer.close()
        await self._db.close()


def _purge_chunk(conn: sqlite3.Connection, updated_before: str) -> list[str]:
    rows = conn.execute(
        "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE terminal=1 "
        "AND updated_at<? LIMIT ?) RETURNING id", (updated_before, PURGE_CHUNK),
    ).fetchall()
    return [r[0] for r in rows]


_UPSERT = (
    "INSERT INTO tasks(id, owner, context_id, state, terminal, updated_at, body) "
    "VALUES (?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET state=excluded.state, "
    "terminal=excluded.terminal, updated_at=excluded.updated_at, body=excluded.body"
)


def _upsert_args(task: Task) -> tuple[Any, ...]:
    return (task.id, task.owner, task.context_id, task.state.value, int(task.state.terminal),
            task.updated_at, encode_row(task))


def _task_id(task: Task) -> str:
    return task.id


def _encode_cursor(seq: int, updated_at: str | None) -> str:
    position: dict[str, Any] = {"s": seq}
    if updated_at is not None:
        position["u"] = updated_at
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str, by_update: bool) -> tuple[str, int]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        position = json.loads(base64.urlsafe_b64decode(padded))
        seq, updated_at = position["s"], position.get("u", "")
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise RequestError("invalid_params", "invalid cursor") from None
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**63 \
            or not isinstance(updated_at, str) or by_update != bool(updated_at):
        raise RequestError("invalid_params", "invalid cursor")
    return updated_at, seq
