"""Per-instance memory store: SQLite with FTS5 full-text search.

Backs the built-in skills ``memory.write``, ``memory.read`` and ``memory.search``.
All methods are synchronous and thread-safe; the daemon calls them from a worker thread.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final

__all__ = [
    "MAX_KEY_CHARS",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "MAX_TEXT_BYTES",
    "Memory",
    "MemoryStore",
    "SearchHit",
    "build_match_expression",
    "query_terms",
]

MAX_TEXT_BYTES: Final = 64 * 1024
MAX_KEY_CHARS: Final = 200
MAX_TAGS: Final = 32
MAX_TAG_CHARS: Final = 64
MAX_SEARCH_LIMIT: Final = 100
# Bounds the MATCH expression built from an arbitrarily long user query.
MAX_QUERY_TERMS: Final = 32
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
PRAGMA user_version = 1;
COMMIT;
"""

_COLUMNS: Final = "m.id, m.key, m.text, m.tags, m.source, m.created_at, m.updated_at"

# Words that carry no search signal in conversational queries such as
# "what do you know about the office printer?". Terms are OR-ed, so leaving these in
# would match nearly every memory.
_STOPWORDS_TEXT: Final = """
a about after again all also am an and any anything are as at be been before being
between both but by can could did do does doing done during each else ever few for
from get got had has have having he her here hers him his how i if in into is it its
itself just know knows let me might more most much must my near no nor not now of on
once only or other our ours own please re remember same say she should so some
something such tell than that the their theirs them then there these they thing
things this those through to too until us very was we were what whatever when where
which while who whom whose why will with would you your yours
"""
_STOPWORDS: Final = frozenset(_STOPWORDS_TEXT.split())

_WORD_RE: Final = re.compile(r"[^\W_]+")


@dataclass(frozen=True, slots=True)
class Memory:
    id: str
    key: str | None
    text: str
    tags: tuple[str, ...]
    source: str
    created_at: str
    updated_at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "key": self.key,
            "text": self.text,
            "tags": list(self.tags),
            "source": self.source,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True, slots=True)
class SearchHit:
    memory: Memory
    score: float
    """Relevance, higher is better (negated bm25)."""
    snippet: str
    """Excerpt of the text with matched terms wrapped in SNIPPET_OPEN/SNIPPET_CLOSE."""

    def to_json(self) -> dict[str, Any]:
        return {"memory": self.memory.to_json(), "score": self.score, "snippet": self.snippet}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _validate_text(text: object) -> str:
    if not isinstance(text, str):
        raise ValueError("memory text must be a string")
    if not text.strip():
        raise ValueError("memory text must not be empty")
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_TEXT_BYTES:
        raise ValueError(f"memory text is {size} bytes; the limit is {MAX_TEXT_BYTES} bytes")
    return text


def _validate_key(key: object) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str):
        raise ValueError("memory key must be a string or null")
    if not key.strip():
        raise ValueError("memory key must not be empty when given")
    if len(key) > MAX_KEY_CHARS:
        raise ValueError(
            f"memory key is {len(key)} characters; the limit is {MAX_KEY_CHARS} characters"
        )
    return key


def _validate_tags(tags: object) -> tuple[str, ...]:
    # A bare string is a Sequence[str] too, and would otherwise become one tag per char.
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise ValueError("memory tags must be a list of strings")
    if len(tags) > MAX_TAGS:
        raise ValueError(f"too many memory tags ({len(tags)}); the limit is {MAX_TAGS}")
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str):
            raise ValueError("memory tags must be strings")
        if not tag.strip():
            raise ValueError("memory tags must not be empty")
        if len(tag) > MAX_TAG_CHARS:
            raise ValueError(
                f"memory tag {tag[:20]!r}... is {len(tag)} characters; "
                f"the limit is {MAX_TAG_CHARS} characters"
            )
        if tag not in out:
            out.append(tag)
    return tuple(out)


def _validate_source(source: object) -> str:
    if not isinstance(source, str):
        raise ValueError("memory source must be a string")
    return source


def query_terms(query: str) -> list[str]:
    """Split user text into lowercased, de-duplicated search terms without stopwords."""
    terms: list[str] = []
    for word in _WORD_RE.findall(query.lower()):
        if word in _STOPWORDS or (len(word) == 1 and word.isascii() and word.isalpha()):
            continue
        if word not in terms:
            terms.append(word)
            if len(terms) >= MAX_QUERY_TERMS:
                break
    return terms


def build_match_expression(query: str) -> str | None:
    """Turn free text into a safe FTS5 MATCH expression, or None if it has no terms.

    Every term is a quoted string, so FTS5 operators and syntax in the user's text
    (AND, NEAR(, ", *, -, column filters) are treated as plain words.
    """
    parts: list[str] = []
    for term in query_terms(query):
        quoted = '"' + term.replace('"', '""') + '"'
        # Prefixing very short terms would match a large share of the vocabulary.
        parts.append(quoted + "*" if len(term) >= 3 else quoted)
    return " OR ".join(parts) if parts else None


def _row_to_memory(row: Sequence[Any]) -> Memory:
    id_, key, text, tags_json, source, created_at, updated_at = row
    tags = json.loads(tags_json) if tags_json else []
    return Memory(
        id=str(id_),
        key=None if key is None else str(key),
        text=str(text),
        tags=tuple(str(t) for t in tags),
        source=str(source),
        created_at=str(created_at),
        updated_at=str(updated_at),
    )


class MemoryStore:
    """SQLite-backed memory store with full-text search. Safe to share between threads."""

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._lock = threading.RLock()
        self._path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit mode: transactions are opened explicitly with BEGIN IMMEDIATE so the
        # write lock is taken up front instead of being upgraded mid-transaction.
        conn = sqlite3.connect(
            self._path, timeout=10.0, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
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
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    @property
    def path(self) -> Path:
        return self._path

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("MemoryStore is closed")
        return self._conn

    def write(
        self,
        text: str,
        *,
        key: str | None = None,
        tags: Sequence[str] = (),
        source: str = "",
    ) -> Memory:
        """Store a memory. With a key, upsert: replaces text/tags/source, keeps id and
        created_at. Raises ValueError on invalid input."""
        text = _validate_text(text)
        key = _validate_key(key)
        tag_tuple = _validate_tags(tags)
        source = _validate_source(source)
        tags_json = json.dumps(list(tag_tuple), ensure_ascii=False)
        now = _now()
        new_id = uuid.uuid4().hex
        with self._lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(
                    "INSERT INTO memories (id, key, text, tags, source, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT(key) DO UPDATE SET"
                    " text = excluded.text, tags = excluded.tags,"
                    " source = excluded.source, updated_at = excluded.updated_at",
                    (new_id, key, text, tags_json, source, now, now),
                )
                if key is None:
                    row = db.execute(
                        f"SELECT {_COLUMNS} FROM memories m WHERE m.id = ?", (new_id,)
                    ).fetchone()
                else:
                    row = db.execute(
                        f"SELECT {_COLUMNS} FROM memories m WHERE m.key = ?", (key,)
                    ).fetchone()
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return _row_to_memory(row)

    def _find_row(self, db: sqlite3.Connection, ref: str) -> tuple[Any, ...] | None:
        # An id match wins over a key match, so a key that happens to equal some other
        # memory's id can never shadow that memory.
        row: tuple[Any, ...] | None = db.execute(
            f"SELECT {_COLUMNS}, m.seq, 0 AS pri FROM memories m WHERE m.id = ?"
            f" UNION ALL SELECT {_COLUMNS}, m.seq, 1 AS pri FROM memories m WHERE m.key = ?"
            " ORDER BY pri LIMIT 1",
            (ref, ref),
        ).fetchone()
        return row

    def read(self, ref: str) -> Memory | None:
        """Return the memory whose id or key is ``ref``, or None."""
        if not isinstance(ref, str) or not ref:
            return None
        with self._lock:
            row = self._find_row(self._db(), ref)
        return None if row is None else _row_to_memory(row[:7])

    def delete(self, ref: str) -> bool:
        """Delete the memory whose id or key is ``ref``. Returns whether one was deleted."""
        if not isinstance(ref, str) or not ref:
            return False
        with self._lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                row = self._find_row(db, ref)
                deleted = False
                if row is not None:
                    cur = db.execute("DELETE FROM memories WHERE seq = ?", (row[7],))
                    deleted = cur.rowcount > 0
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return deleted

    def search(self, query: str, *, limit: int = 10) -> list[SearchHit]:
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
        with self._lock:
            rows = self._db().execute(sql, params).fetchall()
        return [
            SearchHit(memory=_row_to_memory(r[:7]), score=-float(r[7]), snippet=str(r[8]))
            for r in rows
        ]

    def count(self) -> int:
        with self._lock:
            row = self._db().execute("SELECT COUNT(*) FROM memories").fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the database. Idempotent; later calls to other methods raise RuntimeError."""
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.execute("PRAGMA optimize")
                finally:
                    self._conn.close()
                    self._conn = None

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
