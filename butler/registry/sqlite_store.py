"""The embedded registry store: one SQLite file (WAL) on ``butler.storage``: writes and
reads run on the file's worker thread, writes group-committed.

Capabilities, skill ids and tags live in ``agent_terms`` keyed by (kind, term, name), so
"who provides X" is an index range scan in name order, which is also the page order.
Free text is a substring match over a folded copy of names and descriptions.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from butler.registry.model import AgentEntry
from butler.registry.store import AgentNotFound, NameOwned, Query, QuotaExceeded
from butler.storage import Database
from internal.protocol.a2a.model import Unavailable

log = logging.getLogger("butler.registry")

T = TypeVar("T")
SCHEMA_VERSION = 1
_SWEEP_BATCH = 500

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


def _create_schema(conn: sqlite3.Connection, path: Path) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise RuntimeError(f"{path}: registry schema {version} is newer than this Butler")
    conn.executescript(_SCHEMA)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


class SqliteStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    @classmethod
    async def open(cls, path: Path) -> SqliteStore:
        # The folder is the operator's choice (``sqlite:PATH``): created private when
        # missing, but an existing one, perhaps shared, is left as it is.
        db = await Database.open(path, name="registry",
                                 setup=lambda conn: _create_schema(conn, path),
                                 tighten_folder=False)
        return cls(db)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._call(self._db.run, fn, *args)

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._call(self._db.transaction, fn, *args)

    @staticmethod
    async def _call(how: Callable[..., Any], fn: Callable[..., T], *args: Any) -> T:
        try:
            result: T = await how(fn, *args)
        except sqlite3.OperationalError as exc:
            # Locked or failing storage: the caller may retry; the operator gets the cause.
            log.warning("registry store: %s", exc)
            raise Unavailable("overloaded", "registry store busy", retry_after=1) from exc
        return result

    async def close(self) -> None:
        await self._db.close()

    async def upsert(
        self, entry: AgentEntry, *, now: float, max_names: int
    ) -> tuple[AgentEntry, bool]:
        return await self._write(_upsert, entry, now, max_names)

    async def heartbeat(
        self, name: str, owner: str, *, now: float, ttl_seconds: int
    ) -> AgentEntry:
        return await self._write(_heartbeat, name, owner, now, ttl_seconds)

    async def delete(self, name: str, owner: str, *, now: float, force: bool = False) -> None:
        await self._write(_delete, name, owner, now, force)

    async def get(self, name: str, *, now: float) -> AgentEntry | None:
        return await self._read(_live, name, now)

    async def query(
        self, query: Query, *, now: float, limit: int, after: str | None = None
    ) -> tuple[list[AgentEntry], str | None]:
        return await self._read(_query, query, now, limit, after or "")

    async def count_live(self, *, now: float) -> int:
        return await self._read(_count_live, now)

    async def sweep(self, *, now: float) -> int:
        removed = 0
        while True:  # in chunks, each its own transaction: others' writes go between
            names = await self._write(_sweep_chunk, now)
            removed += len(names)
            if len(names) < _SWEEP_BATCH:
                return removed


def _store(conn: sqlite3.Connection, entry: AgentEntry) -> None:
    conn.execute(
        "INSERT INTO agents (name, owner, expires_at, search_text, record)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET owner = excluded.owner,"
        " expires_at = excluded.expires_at, search_text = excluded.search_text,"
        " record = excluded.record",
        (entry.name, entry.owner, entry.expires_at, entry.search_text, entry.to_record()),
    )


# The functions below run on the worker; those that write, inside its transaction
# (BEGIN IMMEDIATE), so a check and the write it guards are one step even when several
# processes share the file.

def _upsert(conn: sqlite3.Connection, entry: AgentEntry, now: float,
            max_names: int) -> tuple[AgentEntry, bool]:
    current = _live(conn, entry.name, now)
    if current is not None and current.owner != entry.owner:
        raise NameOwned(entry.name)
    if current is None:
        held = conn.execute(
            "SELECT count(*) FROM agents WHERE owner = ? AND expires_at > ?",
            (entry.owner, now),
        ).fetchone()[0]
        if held >= max_names:
            raise QuotaExceeded(max_names)
    else:
        entry = replace(entry, registered_at=current.registered_at)
    _store(conn, entry)
    conn.execute("DELETE FROM agent_terms WHERE name = ?", (entry.name,))
    terms = [("capability", t) for t in entry.capabilities]
    terms += [("skill", t) for t in entry.skills] + [("tag", t) for t in entry.tags]
    conn.executemany(
        "INSERT INTO agent_terms (kind, term, name) VALUES (?, ?, ?)",
        [(kind, term, entry.name) for kind, term in terms],
    )
    return entry, current is None


def _heartbeat(conn: sqlite3.Connection, name: str, owner: str, now: float,
               ttl: int) -> AgentEntry:
    current = _live(conn, name, now)
    if current is None:
        raise AgentNotFound(name)
    if current.owner != owner:
        raise NameOwned(name)
    entry = replace(current, expires_at=now + ttl, ttl_seconds=ttl)
    _store(conn, entry)
    return entry


def _delete(conn: sqlite3.Connection, name: str, owner: str, now: float, force: bool) -> None:
    current = _live(conn, name, now)
    if current is None:
        raise AgentNotFound(name)
    if current.owner != owner and not force:
        raise NameOwned(name)
    _remove(conn, [name])


def _remove(conn: sqlite3.Connection, names: list[str]) -> None:
    rows = [(n,) for n in names]
    conn.executemany("DELETE FROM agent_terms WHERE name = ?", rows)
    conn.executemany("DELETE FROM agents WHERE name = ?", rows)


def _count_live(conn: sqlite3.Connection, now: float) -> int:
    row = conn.execute("SELECT count(*) FROM agents WHERE expires_at > ?", (now,))
    return int(row.fetchone()[0])


def _sweep_chunk(conn: sqlite3.Connection, now: float) -> list[str]:
    names = [r[0] for r in conn.execute(
        "SELECT name FROM agents WHERE expires_at <= ? LIMIT ?", (now, _SWEEP_BATCH))]
    _remove(conn, names)
    return names


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
