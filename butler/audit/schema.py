"""The audit file's schema (``PRAGMA user_version`` 2) and its migration from 0 and 1.

A record's hashed fields are stored as compactly as they can be given back exactly
(docs/audit.md#storage): ``at`` as microseconds since the epoch when it is in the one
form Butler writes (``2026-11-24T01:57:16.864102+00:00``), else as that text;
``prev_hash`` not at all (NULL) when it is the previous record's hash, which it always
is for a record Butler appended, so the chain is stored once; ``chain`` as NULL when it
is just the caller; ids Butler made (hex) as their bytes; kind, caller, decision,
detail and hash as ``compact`` says. Those columns keep each value as given (SQLite
does not convert a BLOB). A version 0 file (text columns, every ``prev_hash`` written
out) is rewritten in place on open, row for row: a link that did not hold there is
kept, so verify still reports it. A version 1 file only gains ``audit_names``: its
rows (texts, whole hashes) read as they are.

``audit_segments`` lists the sealed segments of the log (docs/audit.md#retention).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from json.encoder import encode_basestring
from typing import Any, Final

from butler.audit.compact import NAMES_TABLE, Names, stored_detail, stored_hash
from butler.storage import hex_bytes, hex_text, micros_stamp, schema_version, stamp_micros

log = logging.getLogger("butler.audit")

VERSION: Final = 2
GENESIS_HASH: Final = "0" * 64
COLUMNS: Final = (
    "seq, at, kind, caller, task_id, chain, budget_before, budget_after, "
    "decision, code, trace_id, detail, prev_hash, hash"
)
INSERT: Final = f"INSERT INTO audit ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"

_TABLES: Final = (
    """
    CREATE TABLE audit (
        seq           INTEGER PRIMARY KEY,
        at            NOT NULL,
        kind          TEXT NOT NULL,
        caller        TEXT NOT NULL,
        task_id       TEXT,
        chain         TEXT,
        budget_before TEXT,
        budget_after  TEXT,
        decision      TEXT NOT NULL,
        code          TEXT,
        trace_id      TEXT,
        detail        TEXT NOT NULL,
        prev_hash,
        hash          NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS audit_head (
        id   INTEGER PRIMARY KEY CHECK (id = 1),
        seq  INTEGER NOT NULL,
        hash TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE audit_segments (
        last_seq  INTEGER PRIMARY KEY,
        first_seq INTEGER NOT NULL,
        last_hash TEXT NOT NULL,
        last_at   TEXT NOT NULL,
        dropped   INTEGER NOT NULL DEFAULT 0
    )
    """,
    NAMES_TABLE,
)
_MIGRATE_CHUNK: Final = 10_000


def stored_at(at: str) -> int | str:
    micros = stamp_micros(at[:-6] + "Z") if at.endswith("+00:00") else None
    return at if micros is None else micros


def read_at(value: object) -> object:
    return micros_stamp(value)[:-1] + "+00:00" if type(value) is int else value


read_hash = hex_text


def caller_chain(caller: object) -> str:
    """The canonical text of a chain that is just the caller, stored as NULL."""
    return f"[{encode_basestring(caller)}]" if isinstance(caller, str) else ""


def stored_row(row: tuple[Any, ...], prev_hash: str, names: Names,
               detail: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """A record's row as ``Entry.row`` gives it (text columns, hash last) in stored form;
    ``prev_hash``: the hash of the record before it; ``detail``: the record's detail,
    when the caller has it decoded already."""
    chain = None if row[5] == caller_chain(row[3]) else row[5]
    if detail is None:  # a version 0 row: its text, if it is not canonical JSON
        try:
            detail = json.loads(row[11]) if isinstance(row[11], str) else None
        except ValueError:
            detail = None
    digest = row[13]
    full = isinstance(digest, str) and len(digest) == 64 and hex_bytes(digest) != digest
    return (row[0], stored_at(row[1]), names.kept(row[2]), names.kept(row[3]),
            hex_bytes(row[4]), chain, row[6], row[7], names.kept(row[8]), row[9],
            hex_bytes(row[10]),
            stored_detail(row[11], detail, names) if isinstance(detail, dict) else row[11],
            None if row[12] == prev_hash else row[12],
            stored_hash(row[0], digest) if full else digest)


def create_schema(conn: sqlite3.Connection, genesis: tuple[Any, ...]) -> None:
    """Inside the caller's transaction: create, migrate, or nothing. ``genesis``: the
    statement and arguments that give a brand-new log its head."""
    version = schema_version(conn, "audit", VERSION)
    if version == VERSION:
        return
    legacy = conn.execute("SELECT 1 FROM sqlite_master WHERE name='audit'").fetchone()
    if legacy is not None and version == 1:
        conn.execute(NAMES_TABLE)
        conn.execute(f"PRAGMA user_version={VERSION}")
        return
    if legacy is not None:
        conn.execute("ALTER TABLE audit RENAME TO audit_v0")
    for statement in _TABLES:
        conn.execute(statement)
    if legacy is not None:
        _copy_v0(conn)
    else:
        conn.execute(*genesis)
    conn.execute(f"PRAGMA user_version={VERSION}")


def _copy_v0(conn: sqlite3.Connection) -> None:
    copied, after, prev = 0, 0, GENESIS_HASH
    names = Names(conn)
    while True:
        rows = conn.execute(f"SELECT {COLUMNS} FROM audit_v0 WHERE seq > ? ORDER BY seq "
                            "LIMIT ?", (after, _MIGRATE_CHUNK)).fetchall()
        if not rows:
            break
        stored = []
        for row in rows:
            stored.append(stored_row(row, prev, names))
            prev = row[13]
        conn.executemany(INSERT, stored)
        copied += len(rows)
        after = rows[-1][0]
    conn.execute("DROP TABLE audit_v0")
    log.info("audit database migrated to schema %d: %d record(s)", VERSION, copied)


# By default a segment is sealed once it holds this many records (and by retention, once
# its newest record is past it): about 13 MB of a busy log (``audit.segment_records``).
SEGMENT_RECORDS: Final = 65_536


def seal_full(conn: sqlite3.Connection, seq: int, digest: str, at: str,
              segment_records: int) -> None:
    """After an append that ended at ``seq``: seal the open segment if it is full."""
    sealed = conn.execute("SELECT coalesce(max(last_seq), 0) FROM audit_segments").fetchone()[0]
    if seq - sealed >= segment_records:
        seal(conn, sealed + 1, seq, digest, at)


def seal(conn: sqlite3.Connection, first: int, last: int, digest: str, at: str) -> None:
    conn.execute("INSERT INTO audit_segments (last_seq, first_seq, last_hash, last_at) "
                 "VALUES (?,?,?,?)", (last, first, digest, at))
