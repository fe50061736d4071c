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
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from butler.engine.task_document import (
    micros_stamp,
    sealed_row,
    stamp_micros,
    task_from_row,
    task_row,
)
from butler.engine.task_schema import (
    OPEN_STATES,
    TERMINAL_STATES,
    UPSERT,
    VERSION,
    create_schema,
)
from butler.identity import receipt_log
from butler.identity.receipt_log import ReceiptLog
from butler.identity.receipts import Sealed, Sealing
from butler.storage import BatchWriter, CheckpointPolicy, Database, Item
from internal.protocol.a2a.model import RequestError, Task, TaskPage, TaskState

# Small, so a purge never holds the write lock long: the loop's commits wait for it.
PURGE_CHUNK = 200
# Free pages given back to the file system after each purge chunk (4 KiB each).
VACUUM_PAGES = 256
_COLUMNS = "id, owner, context_id, state, document"
# Task writes are committed by the loop itself (``BatchWriter``'s loop mode), not handed
# to the worker: a batch then costs no thread hand-off. Reads run on the worker.
COMMIT_ON_LOOP = True


class TaskStore(Protocol):
    async def put(self, task: Task, defer: float = 0.0) -> None: ...
    async def seal(self, sealing: Sealing) -> Sealed: ...
    async def log_head(self, size: int | None = None) -> str | None: ...
    async def log_consistency(self, old: int, new: int) -> list[bytes]: ...
    async def get(self, task_id: str) -> Task | None: ...
    async def list_tasks(
        self, *, owner: str | None, state: TaskState | None, context_id: str | None,
        cursor: str | None, limit: int, updated_after: str | None = None,
        by_update: bool = False,
    ) -> TaskPage: ...
    async def open_tasks(self) -> list[Task]: ...
    async def ended_since(self, updated_at: str) -> list[str]: ...
    async def purge_terminal(self, updated_before: str) -> list[str]: ...
    async def close(self) -> None: ...


class SqliteTaskStore:
    """``await SqliteTaskStore.open(path)``."""

    def __init__(self, db: Database, checkpoints: CheckpointPolicy,
                 commit_on_loop: bool, log: ReceiptLog | None) -> None:
        self._db = db
        self._log = log
        self._writer = BatchWriter(db, UPSERT, checkpoints=checkpoints,
                                   commit_on_loop=commit_on_loop,
                                   prepare=None if log is None else self._append_receipts)

    @classmethod
    async def open(cls, path: Path, checkpoints: CheckpointPolicy | None = None,
                   commit_on_loop: bool = COMMIT_ON_LOOP,
                   log: ReceiptLog | None = None) -> SqliteTaskStore:
        """``log``: the agent's receipt log, which ``seal`` needs."""
        checkpoints = checkpoints or CheckpointPolicy()
        db = await Database.open(path, name="tasks", setup=create_schema, version=VERSION,
                                 incremental_vacuum=True, pragmas=checkpoints.pragmas())
        return cls(db, checkpoints, commit_on_loop, log)

    async def put(self, task: Task, defer: float = 0.0) -> None:
        """Returns once the task's row is committed (together with any others queued).
        ``defer``: a first write may wait up to that many seconds for the task's next
        write, which then commits in its place (``BatchWriter.submit``): its row is made
        only if it commits itself. Any other row is made here, before it joins a commit.
        Either way a task that cannot be stored raises ``NotStorable`` and no other task's
        write is touched."""
        row = partial(task_row, task) if defer > 0 else task_row(task)
        await self._writer.submit(task.id, row, defer)

    async def seal(self, sealing: Sealing) -> Sealed:
        """``put`` of a terminal task whose receipt the commit makes: its claims join the
        receipt log with the rest of the commit's (``ReceiptLog.append_group``). A task that
        cannot be stored raises ``NotStorable`` here, before its claims join the log."""
        if self._log is None:
            raise RuntimeError("this task store keeps no receipt log")
        row = _SealedRow(sealing, sealed_row(sealing.task))
        await self._writer.submit(sealing.task.id, row)
        assert row.sealed is not None  # made in the commit
        return row.sealed

    async def log_head(self, size: int | None = None) -> str | None:
        """The receipt log's signed head of ``size`` (the latest when None)."""
        return await self._db.run(receipt_log.head, size)

    async def log_consistency(self, old: int, new: int) -> list[bytes]:
        """The log's proof that size ``new`` extends size ``old`` (``merkle.BadProof``)."""
        return await self._db.run(receipt_log.consistency, old, new)

    def _append_receipts(self, conn: sqlite3.Connection, items: Sequence[Item]) -> None:
        assert self._log is not None
        self._log.append_group(conn, (i.sealing for i in items if isinstance(i, _SealedRow)))

    @staticmethod
    def _task(row: Sequence[Any]) -> Task:
        return task_from_row(*row)

    async def get(self, task_id: str) -> Task | None:
        row = await self._db.fetchone(f"SELECT {_COLUMNS} FROM tasks WHERE id=?",
                                      (task_id,))
        return self._task(row) if row else None

    async def list_tasks(
        self, *, owner: str | None, state: TaskState | None, context_id: str | None,
        cursor: str | None, limit: int, updated_after: str | None = None,
        by_update: bool = False,
    ) -> TaskPage:
        """Newest first by creation; with ``by_update`` by last update (ties by creation),
        and then with the total number of matching tasks. Each filter is an index walk in
        that order (``task_schema``): without a state, by an owner or by last update, one
        walk per state, merged. A total without a context or time filter is read from
        ``task_counts``."""
        where: list[str] = []
        args: list[Any] = []
        # With a context, its index and no other: the planner would rather take one that
        # gives the order, and walk a whole state or owner to find a small context.
        other = "" if context_id is None else "+"
        if context_id is not None:
            where.append("context_id=?")
            args.append(context_id)
        if owner is not None:
            where.append(f"{other}owner=?")
            args.append(owner)
        if state is not None:
            where.append(f"{other}state=?")
            args.append(state.value)
        if updated_after is not None:
            where.append(f"{other}updated>=?")
            args.append(_micros(updated_after))
        count_sql, count_args = _count_query(where, args, owner, state, context_id)
        if cursor is not None:
            position = _decode_cursor(cursor, by_update)
            if by_update:
                where.append("(updated<? OR (updated=? AND seq<?))")
                args += [position[0], position[0], position[1]]
            else:
                where.append("seq<?")
                args.append(position[1])
        order = "updated DESC, seq DESC" if by_update else "seq DESC"
        if context_id is None and state is None and (owner is not None or by_update):
            sql, args = _merged(where, args, order, limit + 1)
        else:
            sql = f"SELECT seq, updated, {_COLUMNS} FROM tasks"
            if where:
                sql += " WHERE " + " AND ".join(where)
            sql += f" ORDER BY {order} LIMIT ?"
            args.append(limit + 1)

        def query(conn: sqlite3.Connection) -> tuple[list[Any], int | None]:
            rows = conn.execute(sql, args).fetchall()
            total = conn.execute(count_sql, count_args).fetchone()[0] if by_update else None
            return rows, total

        rows, total = await self._db.run(query)
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = _encode_cursor(rows[-1][0], rows[-1][1] if by_update else None) \
            if more and rows else None
        return TaskPage(tuple(self._task(r[2:]) for r in rows), next_cursor, total)

    async def open_tasks(self) -> list[Task]:
        rows = await self._db.fetchall(
            f"SELECT {_COLUMNS} FROM tasks WHERE state IN ({OPEN_STATES})")
        return [self._task(r) for r in rows]

    async def ended_since(self, updated_at: str) -> list[str]:
        """Ids of the terminal tasks last updated at or after ``updated_at`` (start-up
        recovery): from the index alone, as a busy minute holds tens of thousands."""
        rows = await self._db.fetchall(
            f"SELECT id FROM tasks WHERE state IN ({TERMINAL_STATES}) AND updated>=?",
            (_micros(updated_at),))
        return [r[0] for r in rows]

    async def purge_terminal(self, updated_before: str) -> list[str]:
        """Delete terminal tasks last updated before then; returns their ids.

        In chunks, each its own short transaction that also gives a few free pages back
        (incremental vacuum), so task writes queued meanwhile are committed between them
        rather than after one long delete."""
        purged: list[str] = []
        before = _micros(updated_before)
        while True:
            rows = await self._db.transaction(_purge_chunk, before)
            purged += rows
            if len(rows) < PURGE_CHUNK:
                return purged

    async def close(self) -> None:
        await self._writer.close()
        await self._db.close()


ALL_STATES = tuple(s.value for s in TaskState)
_ALL = ",".join(f"'{s}'" for s in ALL_STATES)


class _SealedRow:
    """A sealed task's row, made in its commit once the receipt log has given it its
    receipt."""

    __slots__ = ("make", "sealed", "sealing")

    def __init__(self, sealing: Sealing,
                 make: Callable[[tuple[str, ...]], tuple[Any, ...]]) -> None:
        self.sealing, self.make = sealing, make
        self.sealed: Sealed | None = None

    def __call__(self) -> tuple[Any, ...]:
        self.sealed = self.sealing.sealed()
        return self.make(self.sealed.task.receipts)


def _purge_chunk(conn: sqlite3.Connection, updated_before: int) -> list[str]:
    rows = conn.execute(
        "DELETE FROM tasks WHERE seq IN (SELECT seq FROM tasks INDEXED BY tasks_state_updated "
        f"WHERE state IN ({TERMINAL_STATES}) AND updated<? LIMIT ?) RETURNING id",
        (updated_before, PURGE_CHUNK),
    ).fetchall()
    if rows:
        conn.execute(f"PRAGMA incremental_vacuum({VACUUM_PAGES})").fetchall()
    return [r[0] for r in rows]


def _merged(where: list[str], args: list[Any], order: str,
            limit: int) -> tuple[str, list[Any]]:
    """The listing as one index walk per state (each at most ``limit`` long, in
    ``order``), merged: no index holds an owner's tasks, or everyone's by last update,
    in that order across states."""
    walk = " AND ".join(["state=?", *where])
    columns = "seq, updated" if "updated" in order else "seq"
    walks = " UNION ALL ".join(
        f"SELECT * FROM (SELECT {columns} FROM tasks WHERE {walk} ORDER BY {order} LIMIT ?)"
        for _ in ALL_STATES)
    return (f"SELECT seq, updated, {_COLUMNS} FROM tasks WHERE seq IN (SELECT seq FROM "
            f"({walks}) ORDER BY {order} LIMIT ?) ORDER BY {order}",
            [a for state in ALL_STATES for a in (state, *args, limit)] + [limit])


def _count_query(where: list[str], args: list[Any], owner: str | None,
                 state: TaskState | None, context_id: str | None) -> tuple[str, list[Any]]:
    """The total's query: from ``task_counts`` when the filters are owner and state only;
    else a count over the index of the filters (every state's, without a state)."""
    if context_id is not None or len(where) > (owner is not None) + (state is not None):
        if state is None and context_id is None:
            where = [f"state IN ({_ALL})", *where]
        return "SELECT COUNT(*) FROM tasks" + (
            " WHERE " + " AND ".join(where) if where else ""), list(args)
    sql = "SELECT coalesce(sum(n), 0) FROM task_counts"
    return (sql + " WHERE " + " AND ".join(where) if where else sql), list(args)


def _micros(stamp: str) -> int:
    micros = stamp_micros(stamp)
    if micros is None:
        raise RequestError("invalid_params", f"not a timestamp the store writes: {stamp}")
    return micros


def _encode_cursor(seq: int, updated: int | None) -> str:
    position: dict[str, Any] = {"s": seq}
    if updated is not None:
        position["u"] = micros_stamp(updated)
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str, by_update: bool) -> tuple[int, int]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        position = json.loads(base64.urlsafe_b64decode(padded))
        seq, updated_at = position["s"], position.get("u", "")
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise RequestError("invalid_params", "invalid cursor") from None
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**63 \
            or not isinstance(updated_at, str) or by_update != bool(updated_at):
        raise RequestError("invalid_params", "invalid cursor")
    updated = stamp_micros(updated_at) if updated_at else 0
    if updated is None:
        raise RequestError("invalid_params", "invalid cursor")
    return updated, seq
