"""The audit file's schema (``PRAGMA user_version`` 3): one row per record, every hashed
field in a column of its own name, as the text it was hashed as (docs/audit.md#storage).

``chain`` and ``detail`` are JSON text (a list, a keyed object) and ``hash`` and
``prev_hash`` whole hex digests, so a row can be checked with any SQLite and JSON
library. A file of an earlier layout is rewritten to this one when it is opened
(``migrate``); one from a newer Butler is refused, untouched.

``audit_segments`` lists the sealed segments of the log (docs/audit.md#retention).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

VERSION: Final = 3
GENESIS_HASH: Final = "0" * 64
COLUMNS: Final = (
    "seq, at, kind, caller, task_id, chain, budget_before, budget_after, "
    "decision, code, trace_id, detail, prev_hash, hash"
)
INSERT: Final = f"INSERT INTO audit ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"

AUDIT_TABLE: Final = """
    CREATE TABLE audit (
        seq           INTEGER PRIMARY KEY,
        at            TEXT NOT NULL,
        kind          TEXT NOT NULL,
        caller        TEXT NOT NULL,
        task_id       TEXT,
        chain         TEXT NOT NULL,
        budget_before TEXT,
        budget_after  TEXT,
        decision      TEXT NOT NULL,
        code          TEXT,
        trace_id      TEXT,
        detail        TEXT NOT NULL,
        prev_hash     TEXT NOT NULL,
        hash          TEXT NOT NULL
    )
    """
OTHER_TABLES: Final = (
    """
    CREATE TABLE IF NOT EXISTS audit_head (
        id   INTEGER PRIMARY KEY CHECK (id = 1),
        seq  INTEGER NOT NULL,
        hash TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS audit_segments (
        last_seq  INTEGER PRIMARY KEY,
        first_seq INTEGER NOT NULL,
        last_hash TEXT NOT NULL,
        last_at   TEXT NOT NULL,
        dropped   INTEGER NOT NULL DEFAULT 0
    )
    """,
)

# By default a segment is sealed once it holds this many records (and by retention, once
# its newest record is past it) (``audit.segment_records``).
SEGMENT_RECORDS: Final = 65_536


def create_tables(conn: sqlite3.Connection, genesis: tuple[Any, ...]) -> None:
    """A brand-new log, inside the caller's transaction; ``genesis``: the statement and
    arguments that give it its head."""
    conn.execute(AUDIT_TABLE)
    for statement in OTHER_TABLES:
        conn.execute(statement)
    conn.execute(*genesis)
    conn.execute(f"PRAGMA user_version={VERSION}")


def seal_full(conn: sqlite3.Connection, seq: int, digest: str, at: str,
              segment_records: int) -> None:
    """After an append that ended at ``seq``: seal the open segment if it is full."""
    sealed = conn.execute("SELECT coalesce(max(last_seq), 0) FROM audit_segments").fetchone()[0]
    if seq - sealed >= segment_records:
        seal(conn, sealed + 1, seq, digest, at)


def seal(conn: sqlite3.Connection, first: int, last: int, digest: str, at: str) -> None:
    conn.execute("INSERT INTO audit_segments (last_seq, first_seq, last_hash, last_at) "
                 "VALUES (?,?,?,?)", (last, first, digest, at))
