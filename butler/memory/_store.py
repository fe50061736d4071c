"""Per-instance memory store: SQLite with FTS5 full-text search, on ``butler.storage``.

Backs the built-in skills ``memory.write``, ``memory.read`` and ``memory.search``. Input is
checked on the caller's side; every SQLite call runs on the memory database's worker.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from butler.memory._model import (
    Memory,
    SearchHit,
    row_to_memory,
    validate_key,
    validate_source,
    validate_tags,
    validate_text,
)
from butler.memory._query import MAX_SEARCH_LIMIT, build_match_expression
from butler.storage import Database, DatabaseClosed
from internal.shares import ANONYMOUS, PoolFull, Share

SNIPPET_OPEN: Final = "["
SNIPPET_CLOSE: Final = "]"
SNIPPET_ELLIPSIS: Final = "…"
SNIPPET_TOKENS: Final = 16

# `seq` is an INTEGER PRIMARY KEY (a rowid alias) because an external-content FTS5 index
# is keyed by rowid, and an implicit rowid may be renumbered by VACUUM, which would
# silently desynchronise the index. `id` remains the public, unique identifier.
_SCHEMA: Final = """
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS memories (
    seq        INTEGER PRIMARY KEY,
    id         TEXT NOT NULL UNIQUE,
    key        TEXT UNIQUE NULL,
    text       TEXT NOT NULL,
    tags       TEXT NOT NULL DEFAULT '[]',
    source     TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
    text, key, tags,
    content='memories',
    content_rowid='seq',
    tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, text, key, tags)
    VALUES (new.seq, new.text, new.key, new.tags);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, text, key, tags)
    VALUES ('delete', old.seq, old.text, old.key, old.tags);
END;
CREATE TRIGGER IF NOT EXISTS memories_au AFTER UPDATE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, text, key, tags)
    VALUES ('delete', old.seq, old.text, old.key, old.tags);
    INSERT INTO memories_fts(rowid, text, key, tags)
    VALUES (new.seq, new.text, new.key, new.tags);
END;
CREATE INDEX IF NOT EXISTS memories_source ON memories(source);
PRAGMA user_version = 1;
COMMIT;
"""

_COLUMNS: Final = "m.id, m.key, m.text, m.tags, m.source, m.created_at, m.updated_at"


def _create_schema(conn: sqlite3.Connection) -> None:
    try:
        conn.executescript(_SCHEMA)
    except sqlite3.OperationalError as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if "fts5" in str(exc).lower():
            raise RuntimeError(
                "the SQLite library in use lacks FTS5 support, required by MemoryStore"
            ) from exc
        raise


def _optimize(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA optimize")


class MemoryStore:
    """``await MemoryStore.open(path)``; every method is a coroutine."""

    def __init__(self, db: Database, share: Share | None = None) -> None:
        """``share``: how many memories there may be, and how many of them one source (the
        caller that wrote them) may have; None: no cap."""
        self._db = db
        self._share = share

    @classmethod
    async def open(cls, path: Path, share: Share | None = None) -> MemoryStore:
        return cls(await Database.open(Path(path), name="memory", setup=_create_schema),
                   share)

    @property
    def path(self) -> Path:
        return self._db.path

    async def write(
        self,
        text: str,
        *,
        key: str | None = None,
        tags: Sequence[str] = (),
        source: str = "",
    ) -> Memory:
        """Store a memory. With a key, upsert: replaces text/tags/source, keeps id and
        created_at. Raises ValueError on invalid input, ``PoolFull`` past the source's
        share of the store."""
        text = validate_text(text)
        key = validate_key(key)
        tags_json = json.dumps(list(validate_tags(tags)), ensure_ascii=False)
        source = validate_source(source)
        now = datetime.now(UTC).isoformat(timespec="microseconds")
        row = await self._db.transaction(_write, uuid.uuid4().hex, key, text, tags_json,
                                         source, now, self._share)
        return row_to_memory(row)

    async def read(self, ref: str) -> Memory | None:
        """Return the memory whose id or key is ``ref``, or None."""
        if not isinstance(ref, str) or not ref:
            return None
        row = await self._db.run(_find_row, ref)
        return None if row is None else row_to_memory(row[:7])

    async def delete(self, ref: str) -> bool:
        """Delete the memory whose id or key is ``ref``. Returns whether one was deleted."""
        if not isinstance(ref, str) or not ref:
            return False
        return await self._db.transaction(_delete, ref)

    async def search(self, query: str, *, limit: int = 10) -> list[SearchHit]:
        """Full-text search over text, key and tags, best match first (bm25).

        ``query`` is free user text; it is tokenized and never passed raw to MATCH.
        """
        match = build_match_expression(query)
        if match is None:
            return []
        limit = max(1, min(MAX_SEARCH_LIMIT, int(limit)))
        # Key and tags are curated labels, so a hit there is a stronger signal than in
        # free text; bm25 weights follow the FTS column order (text, key, tags).
        sql = (
            f"SELECT {_COLUMNS},"
            " bm25(memories_fts, 1.0, 3.0, 2.0) AS rank,"
            " snippet(memories_fts, 0, ?, ?, ?, ?) AS snip"
            " FROM memories_fts JOIN memories m ON m.seq = memories_fts.rowid"
            " WHERE memories_fts MATCH ?"
            " ORDER BY rank, m.updated_at DESC"
            " LIMIT ?"
        )
        params = (SNIPPET_OPEN, SNIPPET_CLOSE, SNIPPET_ELLIPSIS, SNIPPET_TOKENS, match, limit)
        rows = await self._db.fetchall(sql, params)
        return [
            SearchHit(memory=row_to_memory(r[:7]), score=-float(r[7]), snippet=str(r[8]))
            for r in rows
        ]

    async def count(self) -> int:
        row = await self._db.fetchone("SELECT COUNT(*) FROM memories")
        return int(row[0])

    async def close(self) -> None:
        """Close the database (after ``PRAGMA optimize``). Idempotent; later calls to
        other methods raise ``DatabaseClosed``."""
        with contextlib.suppress(DatabaseClosed):  # closed already: nothing to optimize
            await self._db.run(_optimize)
        await self._db.close()


def _write(conn: sqlite3.Connection, new_id: str, key: str | None, text: str,
           tags_json: str, source: str, now: str, share: Share | None) -> tuple[Any, ...]:
    # Counted in the transaction that adds: concurrent writes cannot both pass the check.
    if share is not None and (key is None or conn.execute(
            "SELECT 1 FROM memories WHERE key = ?", (key,)).fetchone() is None):
        mine = conn.execute("SELECT COUNT(*) FROM memories WHERE source = ?",
                            (source,)).fetchone()[0]
        everyone = conn.execute("SELECT COUNT(*) FROM memories").fetchone()[0]
        why = share.refusal("memories", source or ANONYMOUS, mine, everyone)
        if why is not None:
            raise PoolFull(why, mine=mine >= share.limit_for(source or ANONYMOUS))
    conn.execute(
        "INSERT INTO memories (id, key, text, tags, source, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(key) DO UPDATE SET"
        " text = excluded.text, tags = excluded.tags,"
        " source = excluded.source, updated_at = excluded.updated_at",
        (new_id, key, text, tags_json, source, now, now),
    )
    if key is None:
        row = conn.execute(f"SELECT {_COLUMNS} FROM memories m WHERE m.id = ?",
                           (new_id,)).fetchone()
    else:
        row = conn.execute(f"SELECT {_COLUMNS} FROM memories m WHERE m.key = ?",
                           (key,)).fetchone()
    result: tuple[Any, ...] = row
    return result


def _find_row(conn: sqlite3.Connection, ref: str) -> tuple[Any, ...] | None:
    # An id match wins over a key match, so a key that happens to equal some other
    # memory's id can never shadow that memory.
    row: tuple[Any, ...] | None = conn.execute(
        f"SELECT {_COLUMNS}, m.seq, 0 AS pri FROM memories m WHERE m.id = ?"
        f" UNION ALL SELECT {_COLUMNS}, m.seq, 1 AS pri FROM memories m WHERE m.key = ?"
        " ORDER BY pri LIMIT 1",
        (ref, ref),
    ).fetchone()
    return row


def _delete(conn: sqlite3.Connection, ref: str) -> bool:
    row = _find_row(conn, ref)
    if row is None:
        return False
    return conn.execute("DELETE FROM memories WHERE seq = ?", (row[7],)).rowcount > 0
