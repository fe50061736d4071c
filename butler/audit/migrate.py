"""Opening the audit file: a new one is created, one of an earlier layout (schema 0, 1
or 2) is rewritten to schema 3 in place, once, in the caller's one transaction (a
migration cut off leaves the old file as it was, and the next open does it again), and
one from a newer Butler is refused before anything is written.

What earlier layouts stored, and this module alone still reads:

- 0: every column the text that was hashed, ``prev_hash`` written out;
- 1: ``at`` as microseconds since the epoch when in the form Butler writes, hex ids
  (task, trace) and the hash as their bytes, ``chain`` NULL when it is just the caller,
  ``prev_hash`` NULL when it is the previous record's hash;
- 2: as 1, and ``kind``, ``caller``, ``decision`` as numbers into ``audit_names``; a
  detail of ASCII texts as ``[keys, value, ...]`` (keys numbered in ``audit_names``,
  receipt ids ``r-<hex>`` as ``null`` and their 16 bytes after a NUL, durations
  ``<s>.<6 digits>`` as microseconds), ``{}`` as an empty BLOB; the hash whole only
  every 64th record, its first 4 bytes otherwise.

Every record keeps its hash: it is rewritten as the text it was hashed as, so the chain,
the sealed segments and their exports verify as before. A row that does not decode (an
edited one) is kept as it is stored, for ``verify`` to name.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from butler.audit.rows import AuditError, live_base, record_from_row
from butler.audit.schema import (
    AUDIT_TABLE,
    COLUMNS,
    INSERT,
    OTHER_TABLES,
    VERSION,
    create_tables,
)
from butler.storage import schema_version
from internal.signing import canonical

PROGRESS_EVERY: Final = 100_000  # records between two lines of progress on stderr
_CHUNK: Final = 5_000
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def open_schema(conn: sqlite3.Connection, genesis: tuple[Any, ...]) -> int | None:
    """Inside the caller's write transaction: create, migrate, or nothing. ``genesis``:
    the statement and arguments that give a brand-new log its head. Returns the version
    migrated from, if any."""
    version = schema_version(conn, "audit", VERSION)
    if version == VERSION:
        return None
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'audit'").fetchone() is None:
        create_tables(conn, genesis)
        return None
    conn.execute("ALTER TABLE audit RENAME TO audit_old")
    conn.execute(AUDIT_TABLE)
    for statement in OTHER_TABLES:
        conn.execute(statement)
    _copy(conn, version)
    conn.execute("DROP TABLE audit_old")
    conn.execute("DROP TABLE IF EXISTS audit_names")
    conn.execute(f"PRAGMA user_version={VERSION}")
    return version


def _copy(conn: sqlite3.Connection, version: int) -> None:
    total = conn.execute("SELECT count(*) FROM audit_old").fetchone()[0]
    file = conn.execute("PRAGMA database_list").fetchone()[2] or "audit database"
    names: dict[int, str] = {}
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'audit_names'").fetchone():
        names = dict(conn.execute("SELECT ref, name FROM audit_names").fetchall())
    base, base_hash = live_base(conn)
    copied, after, prev = 0, -1, (0, "")
    while True:
        rows = conn.execute(f"SELECT {COLUMNS} FROM audit_old WHERE seq > ? ORDER BY seq "
                            "LIMIT ?", (after, _CHUNK)).fetchall()
        if not rows:
            break
        rewritten = []
        for row in rows:
            seq = row[0]
            link = base_hash if seq - 1 == base else prev[1] if prev[0] == seq - 1 else ""
            new = _rewritten(row, link, names)
            rewritten.append(new)
            prev = (seq, new[13])
            copied += 1
            if copied % PROGRESS_EVERY == 0:
                print(f"{file}: audit schema {version} -> {VERSION}: {copied} of {total} "
                      "records rewritten", file=sys.stderr, flush=True)
        conn.executemany(INSERT, rewritten)
        after = rows[-1][0]
    if total >= PROGRESS_EVERY:
        print(f"{file}: audit schema {version} -> {VERSION}: done, {copied} records",
              file=sys.stderr, flush=True)


def _rewritten(row: tuple[Any, ...], link: str, names: dict[int, str]) -> tuple[Any, ...]:
    """A stored row of any earlier layout as schema 3 stores it; ``link``: the hash of
    the record before it (for a ``prev_hash`` or hash stored by position)."""
    (seq, at, kind, caller, task_id, chain, before, after) = row[:8]
    (decision, code, trace_id, detail, prev_hash, digest) = row[8:]
    caller = _name(caller, names)
    if type(at) is int:
        at = (_EPOCH + timedelta(microseconds=at)).isoformat(timespec="microseconds")
    if chain is None and isinstance(caller, str):
        chain = canonical([caller]).decode()
    new = [seq, at, _name(kind, names), caller, _hex(task_id), chain, before, after,
           _name(decision, names), code, _hex(trace_id), _detail(detail, names),
           link if prev_hash is None else prev_hash, _hex(digest)]
    if type(digest) is bytes and len(digest) == 4:  # given by chaining on, as 2 read it
        try:
            computed = record_from_row((*new[:13], "")).compute_hash()
        except (AuditError, ValueError, UnicodeError):
            computed = ""
        if computed[:8] == digest.hex():
            new[13] = computed
    return tuple(new)


def _name(value: object, names: dict[int, str]) -> object:
    """A layout 2 name number as its name; else the value as it is."""
    if type(value) is bytes:
        return names.get(int.from_bytes(value, "big"), value)
    return value


def _hex(value: object) -> object:
    return value.hex() if type(value) is bytes else value


def _detail(stored: object, names: dict[int, str]) -> object:
    """A layout 2 detail as the text it was hashed as; else the value as it is."""
    if stored == b"":
        return "{}"
    if type(stored) is not bytes:
        return stored
    array, nul, tail = stored.partition(b"\x00")
    try:
        values = json.loads(array) if nul else None
        if not isinstance(values, list) or not values or values[0] not in names \
                or type(values[0]) is not int:
            return stored
        keys = json.loads(names[values[0]])
    except (ValueError, RecursionError):
        return stored
    if not isinstance(keys, list) or len(keys) != len(values) - 1 \
            or not all(type(k) is str for k in keys):
        return stored
    detail, at = {}, 0
    for key, value in zip(keys, values[1:], strict=True):
        if value is None and len(tail) >= at + 16:
            value, at = "r-" + tail[at:at + 16].hex(), at + 16
        elif type(value) is int:
            value = f"{value // 1_000_000}.{value % 1_000_000:06d}"
        elif type(value) is not str:
            return stored
        detail[key] = value
    return canonical(detail).decode() if at == len(tail) else stored
