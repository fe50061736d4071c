"""The embedded registry store: one SQLite file (WAL) on ``butler.storage``: writes and
reads run on the file's worker thread, writes group-committed.

Capabilities, skill ids and tags live in ``agent_terms`` keyed by (kind, term, name), so
"who provides X" is an index range scan in name order, which is also the page order.
Free text goes through ``agents_fts``, an FTS5 index of each agent's folded searchable
text, kept in step with ``agents`` by triggers (so every write path, and a migration,
keeps it right); each query word is then also checked as a substring, as the Redis store
checks it.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from butler.registry.model import AgentEntry, query_tokens
from butler.registry.store import AgentNotFound, NameOwned, Query, QuotaExceeded
from butler.storage import Database
from internal.protocol.a2a.model import Unavailable

log = logging.getLogger("butler.registry")

T = TypeVar("T")
SCHEMA_VERSION = 2
_SWEEP_BATCH = 500
# Which index drives a free-text query. Reading the m full-text matches, then filtering
# and sorting them by name, is one read each; walking names in order and probing the
# full-text index for each finds a page of p among n agents in about p * n / m probes,
# each _PROBE_OVER_READ times the cost of a read (its figures: bench/HISTORY.md). The two
# are equal near m = sqrt(p * n * _PROBE_OVER_READ): with fewer matches, the full-text
# index drives.
_PROBE_OVER_READ = 16 / 3.5

# `id` is an INTEGER PRIMARY KEY (a rowid alias) because the external-content FTS5 index
# is keyed by rowid, and an implicit rowid may be renumbered by VACUUM, which would
# silently desynchronise the index (as in butler/memory).
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS agents (
        id          INTEGER PRIMARY KEY,
        name        TEXT NOT NULL UNIQUE,
        owner       TEXT NOT NULL,
        expires_at  REAL NOT NULL,
        search_text TEXT NOT NULL,
        record      TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS agents_owner ON agents(owner, expires_at)",
    "CREATE INDEX IF NOT EXISTS agents_expiry ON agents(expires_at)",
    """CREATE TABLE IF NOT EXISTS agent_terms (
        kind TEXT NOT NULL,
        term TEXT NOT NULL,
        name TEXT NOT NULL,
        PRIMARY KEY (kind, term, name)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS agent_terms_name ON agent_terms(name)",
    # remove_diacritics 0: a word matches as folded, as the Redis store compares it.
    """CREATE VIRTUAL TABLE IF NOT EXISTS agents_fts USING fts5(
        search_text, content='agents', content_rowid='id',
        tokenize='unicode61 remove_diacritics 0'
    )""",
    """CREATE TRIGGER IF NOT EXISTS agents_fts_insert AFTER INSERT ON agents BEGIN
        INSERT INTO agents_fts(rowid, search_text) VALUES (new.id, new.search_text);
    END""",
    """CREATE TRIGGER IF NOT EXISTS agents_fts_delete AFTER DELETE ON agents BEGIN
        INSERT INTO agents_fts(agents_fts, rowid, search_text)
        VALUES ('delete', old.id, old.search_text);
    END""",
    # Rows in agents, kept by triggers, so counting the live ones reads only the expired
    # rows a sweep has not reached yet instead of every agent, which grows with the
    # registry and holds its one thread.
    """CREATE TABLE IF NOT EXISTS agent_count (
        one INTEGER PRIMARY KEY CHECK (one = 1),
        n   INTEGER NOT NULL
    )""",
    "INSERT OR IGNORE INTO agent_count (one, n) VALUES (1, 0)",
    """CREATE TRIGGER IF NOT EXISTS agents_count_insert AFTER INSERT ON agents BEGIN
        UPDATE agent_count SET n = n + 1;
    END""",
    """CREATE TRIGGER IF NOT EXISTS agents_count_delete AFTER DELETE ON agents BEGIN
        UPDATE agent_count SET n = n - 1;
    END""",
    # A heartbeat rewrites the row with the same text: the index is left alone.
    """CREATE TRIGGER IF NOT EXISTS agents_fts_update AFTER UPDATE OF search_text ON agents
    WHEN old.search_text IS NOT new.search_text BEGIN
        INSERT INTO agents_fts(agents_fts, rowid, search_text)
        VALUES ('delete', old.id, old.search_text);
        INSERT INTO agents_fts(rowid, search_text) VALUES (new.id, new.search_text);
    END""",
)


def _create_schema(conn: sqlite3.Connection, path: Path) -> None:
    # One write transaction, version read inside it: two registries opening one file at
    # once migrate it once.
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"{path}: registry schema {version} is newer than this Butler")
        if version < SCHEMA_VERSION:
            _migrate(conn, version)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _migrate(conn: sqlite3.Connection, version: int) -> None:
    """Version 1 had no ``id``, no full-text index and no row count: its agents are
    copied into the new table, whose insert triggers index and count them. Terms are
    keyed by name and stay."""
    if version == 1:
        conn.execute("ALTER TABLE agents RENAME TO agents_v1")
        conn.execute("DROP INDEX IF EXISTS agents_owner")
        conn.execute("DROP INDEX IF EXISTS agents_expiry")
    try:
        for statement in _SCHEMA:
            conn.execute(statement)
    except sqlite3.OperationalError as exc:
        if "fts5" in str(exc).lower():
            raise RuntimeError("the SQLite library in use lacks FTS5, which the registry "
                               "store needs") from exc
        raise
    if version == 1:
        conn.execute("INSERT INTO agents (name, owner, expires_at, search_text, record)"
                     " SELECT name, owner, expires_at, search_text, record FROM agents_v1"
                     " ORDER BY name")
        conn.execute("DROP TABLE agents_v1")
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

    async def ping(self) -> None:
        await self._read(_ping)

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


def _ping(conn: sqlite3.Connection) -> None:
    conn.execute("SELECT 1 FROM agents LIMIT 1").fetchall()


def _count_live(conn: sqlite3.Connection, now: float) -> int:
    # One read transaction for both, so a write between them cannot be half counted.
    row = conn.execute("SELECT (SELECT n FROM agent_count),"
                       " (SELECT count(*) FROM agents WHERE expires_at <= ?)", (now,))
    stored, expired = row.fetchall()[0]
    return int(stored) - int(expired)


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
    fts_drives = False
    if query_tokens(query.words):
        agents = conn.execute("SELECT max(id) FROM agents").fetchone()[0] or 0
        enough = max(100, math.isqrt(int((limit + 1) * agents * _PROBE_OVER_READ)))
        found = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM agents_fts WHERE agents_fts MATCH ? LIMIT ?)",
            (fts_match(query.words), enough)).fetchone()[0]
        fts_drives = found < enough
    sql, params = query_sql(query, now=now, limit=limit + 1, after=after, fts_drives=fts_drives)
    entries = [AgentEntry.from_record(r[0]) for r in conn.execute(sql, params)]
    if len(entries) > limit:
        return entries[:limit], entries[limit - 1].name
    return entries, None


def fts_match(words: tuple[str, ...]) -> str:
    """The FTS5 query: every word of every query word, each quoted (so none is read as
    an operator), ANDed. A query word without letters or digits adds none: it is
    checked as a substring only."""
    return " ".join(f'"{w}"' for w in query_tokens(words)) or '""'


def query_sql(query: Query, *, now: float, limit: int, after: str,
              fts_drives: bool = False) -> tuple[str, list[Any]]:
    """The SQL for one page. The driving index is fixed with CROSS JOIN: the full-text
    matches when there are few (``fts_drives``), else the first term filter's range in
    name order, else every agent in name order."""
    terms = [(kind, term) for kind, term in (
        ("capability", query.capability), ("skill", query.skill), ("tag", query.tag)
    ) if term is not None]
    tokens = bool(query_tokens(query.words))
    params: list[Any] = []
    if fts_drives and tokens:
        sql = ("SELECT a.record FROM agents_fts f CROSS JOIN agents a ON a.id = f.rowid"
               " WHERE agents_fts MATCH ? AND a.name > ? AND a.expires_at > ?")
        params += [fts_match(query.words), after, now]
        order = "a.name"
    elif terms:
        kind, term = terms.pop(0)
        sql = ("SELECT a.record FROM agent_terms t CROSS JOIN agents a ON a.name = t.name"
               " WHERE t.kind = ? AND t.term = ? AND t.name > ? AND a.expires_at > ?")
        params += [kind, term, after, now]
        order = "t.name"
    else:
        sql = "SELECT a.record FROM agents a WHERE a.name > ? AND a.expires_at > ?"
        params += [after, now]
        order = "a.name"
    if tokens and not fts_drives:
        # Correlated on purpose: "a.id IN (matches)" would read every match first.
        sql += (" AND EXISTS (SELECT 1 FROM agents_fts f"
                " WHERE agents_fts MATCH ? AND f.rowid = a.id)")
        params.append(fts_match(query.words))
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
