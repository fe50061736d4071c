"""The embedded registry store: one SQLite file (WAL). Writes and free-text queries run on
one worker thread; other reads (an agent by name, a page of up to ``LOOP_READ_PAGE``) run
on the event loop through a read-only connection, and move to the worker if they would
take more than ``LOOP_READ_STEPS`` SQLite steps.

Capabilities, skill ids and tags live in ``agent_terms`` keyed by (kind, term, name), so
"who provides X" is an index range scan in name order, which is also the page order.
Free text is a substring match over a folded copy of names and descriptions.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from butler.registry.model import AgentEntry
from butler.registry.store import AgentNotFound, NameOwned, Query, QuotaExceeded
from internal.protocol.a2a.model import Unavailable

log = logging.getLogger("butler.registry")

T = TypeVar("T")
SCHEMA_VERSION = 1
_SWEEP_BATCH = 500
# 1-2 ms of work on the loop: a page of 100 of one capability's providers takes about
# 1,000 steps, a free-text scan of 100k agents 800,000.
LOOP_READ_STEPS = 5_000
# Larger pages (max_page_size allows 1,000) would only run into the budget and be read
# twice: they go to the worker at once.
LOOP_READ_PAGE = 250
_STEPS_PER_TICK = 1_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agents (
    name        TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    expires_at  REAL NOT NULL,
    search_text TEXT NOT NULL,
    record      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS agents_owner ON agents(owner, expires_at);
CREATE INDEX IF NOT EXISTS agents_expiry ON agents(expires_at);
CREATE TABLE IF NOT EXISTS agent_terms (
    kind TEXT NOT NULL,
    term TEXT NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY (kind, term, name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS agent_terms_name ON agent_terms(name);
"""


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None, timeout=10.0)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"{path}: registry schema {version} is newer than this Butler")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(_SCHEMA)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    except BaseException:
        conn.close()
        raise
    return conn


def _connect_reader(path: Path) -> sqlite3.Connection:
    """The event loop's own connection: read-only, and never waiting for a lock (a busy
    file sends the read to the worker thread instead)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=0.0)
    conn.execute("PRAGMA query_only=ON")
    return conn


class SqliteStore:
    def __init__(self, conn: sqlite3.Connection, executor: ThreadPoolExecutor,
                 reader: sqlite3.Connection) -> None:
        self._conn = conn
        self._executor = executor
        self._reader = reader
        self._ticks = 0
        reader.set_progress_handler(self._tick, _STEPS_PER_TICK)
        self._closed = False

    @classmethod
    async def open(cls, path: Path) -> SqliteStore:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="registry-sqlite")
        try:
            conn = await asyncio.get_running_loop().run_in_executor(executor, _connect, path)
        except BaseException:
            executor.shutdown(wait=True)
            raise
        try:
            reader = _connect_reader(path)
        except BaseException:
            await asyncio.get_running_loop().run_in_executor(executor, conn.close)
            executor.shutdown(wait=True)
            raise
        return cls(conn, executor, reader)

    def _tick(self) -> int:
        self._ticks += 1
        return self._ticks > LOOP_READ_STEPS // _STEPS_PER_TICK

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` on the loop's connection when it finishes within the step
        budget; otherwise (a long scan, a busy or failing file) again on the worker."""
        if not self._closed:
            self._ticks = 0
            try:
                return fn(self._reader, *args)
            except sqlite3.Error:
                pass
        return await self._run(fn, self._conn, *args)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise RuntimeError("registry store is closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except sqlite3.OperationalError as exc:
            # Locked or failing storage: the caller may retry; the operator gets the cause.
            log.warning("registry store: %s", exc)
            raise Unavailable("overloaded", "registry store busy", retry_after=1) from exc

    async def close(self) -> None:
        if self._closed:
            return
        await self._run(self._conn.close)
        self._reader.close()
        self._closed = True
        self._executor.shutdown(wait=True)

    async def upsert(
        self, entry: AgentEntry, *, now: float, max_names: int
    ) -> tuple[AgentEntry, bool]:
        return await self._run(self._upsert, entry, now, max_names)

    async def heartbeat(
        self, name: str, owner: str, *, now: float, ttl_seconds: int
    ) -> AgentEntry:
        return await self._run(self._heartbeat, name, owner, now, ttl_seconds)

    async def delete(self, name: str, owner: str, *, now: float, force: bool = False) -> None:
        await self._run(self._delete, name, owner, now, force)

    async def get(self, name: str, *, now: float) -> AgentEntry | None:
        return await self._read(_live, name, now)

    async def query(
        self, query: Query, *, now: float, limit: int, after: str | None = None
    ) -> tuple[list[AgentEntry], str | None]:
        if query.words or limit > LOOP_READ_PAGE:  # a scan or a long page: to the worker
            return await self._run(_query, self._conn, query, now, limit, after or "")
        return await self._read(_query, query, now, limit, after or "")

    async def count_live(self, *, now: float) -> int:
        return await self._run(self._count_live, now)

    async def sweep(self, *, now: float) -> int:
        return await self._run(self._sweep, now)

    def _write(self, entry: AgentEntry) -> None:
        self._conn.execute(
            "INSERT INTO agents (name, owner, expires_at, search_text, record)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET owner = excluded.owner,"
            " expires_at = excluded.expires_at, search_text = excluded.search_text,"
            " record = excluded.record",
            (entry.name, entry.owner, entry.expires_at, entry.search_text, entry.to_record()),
        )

    def _upsert(self, entry: AgentEntry, now: float, max_names: int) -> tuple[AgentEntry, bool]:
        with _transaction(self._conn):
            current = _live(self._conn, entry.name, now)
            if current is not None and current.owner != entry.owner:
                raise NameOwned(entry.name)
            if current is None:
                held = self._conn.execute(
                    "SELECT count(*) FROM agents WHERE owner = ? AND expires_at > ?",
                    (entry.owner, now),
                ).fetchone()[0]
                if held >= max_names:
                    raise QuotaExceeded(max_names)
            else:
                entry = replace(entry, registered_at=current.registered_at)
            self._write(entry)
            self._conn.execute("DELETE FROM agent_terms WHERE name = ?", (entry.name,))
            terms = [("capability", t) for t in entry.capabilities]
            terms += [("skill", t) for t in entry.skills] + [("tag", t) for t in entry.tags]
            self._conn.executemany(
                "INSERT INTO agent_terms (kind, term, name) VALUES (?, ?, ?)",
                [(kind, term, entry.name) for kind, term in terms],
            )
        return entry, current is None

    def _heartbeat(self, name: str, owner: str, now: float, ttl: int) -> AgentEntry:
        with _transaction(self._conn):
            current = _live(self._conn, name, now)
            if current is None:
                raise AgentNotFound(name)
            if current.owner != owner:
                raise NameOwned(name)
            entry = replace(current, expires_at=now + ttl, ttl_seconds=ttl)
            self._write(entry)
        return entry

    def _delete(self, name: str, owner: str, now: float, force: bool) -> None:
        with _transaction(self._conn):
            current = _live(self._conn, name, now)
            if current is None:
                raise AgentNotFound(name)
            if current.owner != owner and not force:
                raise NameOwned(name)
            self._remove([name])

    def _remove(self, names: list[str]) -> None:
        rows = [(n,) for n in names]
        self._conn.executemany("DELETE FROM agent_terms WHERE name = ?", rows)
        self._conn.executemany("DELETE FROM agents WHERE name = ?", rows)

    def _count_live(self, now: float) -> int:
        row = self._conn.execute("SELECT count(*) FROM agents WHERE expires_at > ?", (now,))
        return int(row.fetchone()[0])

    def _sweep(self, now: float) -> int:
        removed = 0
        while True:
            with _transaction(self._conn):
                names = [r[0] for r in self._conn.execute(
                    "SELECT name FROM agents WHERE expires_at <= ? LIMIT ?", (now, _SWEEP_BATCH)
                )]
                self._remove(names)
            removed += len(names)
            if len(names) < _SWEEP_BATCH:
                return removed


def _live(conn: sqlite3.Connection, name: str, now: float) -> AgentEntry | None:
    # fetchall, not fetchone: a statement stepped to its end ends its read transaction
    # at once, rather than whenever the cursor is freed.
    rows = conn.execute(
        "SELECT record FROM agents WHERE name = ? AND expires_at > ?", (name, now)
    ).fetchall()
    return AgentEntry.from_record(rows[0][0]) if rows else None


def _query(conn: sqlite3.Connection, query: Query, now: float, limit: int,
           after: str) -> tuple[list[AgentEntry], str | None]:
    sql, params = query_sql(query, now=now, limit=limit + 1, after=after)
    entries = [AgentEntry.from_record(r[0]) for r in conn.execute(sql, params)]
    if len(entries) > limit:
        return entries[:limit], entries[limit - 1].name
    return entries, None


def query_sql(query: Query, *, now: float, limit: int, after: str) -> tuple[str, list[Any]]:
    """The SQL for one page; the first term filter drives the scan (CROSS JOIN fixes the
    join order, so SQLite walks the term index in name order instead of every agent)."""
    terms = [(kind, term) for kind, term in (
        ("capability", query.capability), ("skill", query.skill), ("tag", query.tag)
    ) if term is not None]
    params: list[Any] = []
    if terms:
        kind, term = terms.pop(0)
        sql = ("SELECT a.record FROM agent_terms t CROSS JOIN agents a ON a.name = t.name"
               " WHERE t.kind = ? AND t.term = ? AND t.name > ? AND a.expires_at > ?")
        params += [kind, term, after, now]
        order = "t.name"
    else:
        sql = "SELECT a.record FROM agents a WHERE a.name > ? AND a.expires_at > ?"
        params += [after, now]
        order = "a.name"
    for kind, term in terms:
        sql += (" AND EXISTS (SELECT 1 FROM agent_terms x"
                " WHERE x.kind = ? AND x.term = ? AND x.name = a.name)")
        params += [kind, term]
    for word in query.words:
        sql += " AND instr(a.search_text, ?) > 0"
        params.append(word)
    sql += f" ORDER BY {order} LIMIT ?"
    params.append(limit)
    return sql, params


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT, so a check and the write it guards are one step even
    when several processes share the file."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
