"""Append-only, hash-chained audit trail in SQLite.

Every record carries the SHA-256 of its own canonical JSON encoding (which includes the
previous record's hash), and a one-row ``audit_head`` table remembers the last seq and hash
so that truncation is detected too. See docs/audit.md for what this does and does not prove.

The file is served by the audit database's worker (``butler.storage``). The methods here
block until it answers, for the CLI and tests; they refuse to run on an event loop's
thread. The daemon appends through ``AuditWriter``, which only queues jobs for the worker.
Callers pass identities (agent ids, task ids), never tokens: nothing here accepts a secret.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from butler.audit.migrate import open_schema
from butler.audit.record import AuditRecord, Entry, Row, decode_text
from butler.audit.rows import (
    AuditError,
    live_base,
    read_head,
    record_from_row,
    records_after,
    tail_records,
)
from butler.audit.schema import COLUMNS as _COLUMNS
from butler.audit.schema import GENESIS_HASH, INSERT, SEGMENT_RECORDS, seal_full
from butler.runtime.clock import now_utc_iso
from butler.storage import Database
from internal.protocol.a2a.codec.jcs import NotCanonical

__all__ = ["GENESIS_HASH", "AuditError", "AuditLog", "AuditRecord", "VerifyResult"]

_PAGE: Final = 256
_GENESIS_HEAD: Final = (
    "INSERT INTO audit_head (id, seq, hash) SELECT 1, 0, ? "
    "WHERE NOT EXISTS (SELECT 1 FROM audit_head)", (GENESIS_HASH,))


@dataclass(frozen=True, slots=True)
class VerifyResult:
    ok: bool
    checked: int
    first_bad_seq: int | None
    reason: str


def _create_schema(conn: sqlite3.Connection) -> None:
    # Tampered bytes must reach verify() as a mismatch, not as a decode crash.
    conn.text_factory = decode_text
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Only a brand-new log gets a genesis head; a missing head on a non-empty log
        # is evidence of tampering and is left for verify() to report.
        migrated = open_schema(conn, _GENESIS_HEAD)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    if migrated == 0:  # a file from before incremental auto-vacuum
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("VACUUM")
    elif migrated is not None:  # the pages of the old rows go back to the file system
        conn.execute("PRAGMA incremental_vacuum").fetchall()


class AuditLog:
    """``AuditLog(path)`` opens the file and blocks until it is open (CLI, tests);
    ``await AuditLog.open(path)`` opens it from an event loop."""

    def __init__(self, path: Path, *, db: Database | None = None,
                 segment_records: int = SEGMENT_RECORDS) -> None:
        self.path = path
        self.db = db or Database.open_blocking(path, name="audit", setup=_create_schema,
                                               incremental_vacuum=True)
        self.segment_records = segment_records  # a segment is sealed once this full

    @classmethod
    async def open(cls, path: Path, segment_records: int = SEGMENT_RECORDS) -> AuditLog:
        return cls(path, db=await Database.open(path, name="audit", setup=_create_schema,
                                                incremental_vacuum=True),
                   segment_records=segment_records)

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self.db.close_blocking()

    def append(self, kind: str, **fields: Any) -> AuditRecord:
        """One record; ``fields`` are ``Entry``'s (caller, task_id, chain, budget_before,
        budget_after, decision, code, trace_id, detail), checked there."""
        return self.append_many([{"kind": kind, **fields}])[0]

    def append_many(self, entries: Sequence[Mapping[str, Any]]) -> list[AuditRecord]:
        """Append several records, chained in order, in one transaction (one fsync)."""
        return [entry.record(row) for entry, row in self._write(entries)]

    def write_many(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """``append_many`` for callers that do not need the records back."""
        self._write(entries)

    def _write(self, entries: Sequence[Mapping[str, Any]]) -> list[tuple[Entry, Row]]:
        checked = [Entry(**entry) for entry in entries]
        return self.db.call(append_entries, checked, None, self.segment_records,
                            write=True)

    def head(self) -> tuple[int, str]:
        """(last seq, last hash); keep a copy elsewhere to detect a wholesale rewrite."""
        head = self.db.call(read_head)
        if head is None:
            raise AuditError("audit_head is missing")
        return head

    async def last_at(self) -> datetime | None:
        row = await self.db.fetchone("SELECT at FROM audit ORDER BY seq DESC LIMIT 1", ())
        return None if row is None else datetime.fromisoformat(row[0])

    async def finished_task_ids(self, since: datetime) -> set[str]:
        """Tasks with a ``task_finished`` record stamped at or after ``since``: read back
        from the end, in pages, until the records are older (stamps follow seq, give or
        take a clock step, which ``since`` leaves room for)."""
        return await self.db.run(_finished_since, since.isoformat(timespec="microseconds"))

    def tail(self, n: int = 20) -> list[AuditRecord]:
        """The last ``n`` records, oldest first."""
        if n <= 0:
            return []
        return self.db.call(tail_records, n)

    def iter_all(self, after: int = 0) -> Iterator[AuditRecord]:
        """The live records after seq ``after``, oldest first."""
        # Paged, so the worker serves others while the caller runs between yields.
        while True:
            records = self.db.call(records_after, after, _PAGE)
            yield from records
            if len(records) < _PAGE:
                return
            after = records[-1].seq

    def verify(self, *, anchor: tuple[int, str] | None = None) -> VerifyResult:
        """Recheck every hash, link and seq, then the stored head.

        ``anchor`` is a ``head()`` exported earlier; if given, the record at that seq must
        still exist with that hash, which catches a rewrite that also rewrote the head.
        """
        return self.db.call(_verify, anchor)


def _verify(conn: sqlite3.Connection, anchor: tuple[int, str] | None) -> VerifyResult:
    conn.execute("BEGIN")  # one snapshot for the rows and the head
    try:
        return _verify_snapshot(conn, anchor)
    finally:
        conn.execute("COMMIT")


def _verify_snapshot(conn: sqlite3.Connection, anchor: tuple[int, str] | None) -> VerifyResult:
    """From the last dropped segment's sealed hash (genesis if none was dropped)."""
    base, prev_hash = live_base(conn)
    sealed = dict(conn.execute("SELECT last_seq, last_hash FROM audit_segments "
                               "WHERE dropped = 0").fetchall())
    checked = 0
    last = base
    for row in conn.execute(f"SELECT {_COLUMNS} FROM audit WHERE seq > ? ORDER BY seq",
                            (base,)):
        seq = row[0]
        expected = last + 1
        if seq > expected:
            return failed(checked, expected, f"missing record: seq {expected} is absent")
        try:
            record = record_from_row(row)
            intact = record.compute_hash() == record.hash
        except (UnicodeError, NotCanonical):  # text the file held as bytes that are not UTF-8
            return failed(checked, seq, "edited record: contains invalid UTF-8")
        except AuditError as exc:
            return failed(checked, seq, f"edited record: {exc}")
        if record.prev_hash != prev_hash:
            return failed(
                checked,
                seq,
                f"broken link: prev_hash does not match the hash of seq {seq - 1}",
            )
        if not intact:
            return failed(checked, seq, "edited record: hash does not match contents")
        if anchor is not None and seq == anchor[0] and record.hash != anchor[1]:
            return failed(checked, seq, "record does not match the exported head")
        if seq in sealed and sealed[seq] != record.hash:
            return failed(checked, seq, "record does not match its sealed segment's hash")
        prev_hash = record.hash
        checked += 1
        last = seq
    if anchor is not None and anchor[0] > last:
        return failed(checked, last + 1, f"truncated: exported head is seq {anchor[0]}")
    head = read_head(conn)
    if head is None:
        return failed(checked, None, "audit_head is missing")
    head_seq, head_hash = head
    if head_seq > last:
        return failed(
            checked,
            last + 1,
            f"truncated: head is seq {head_seq} but the last record is seq {last}",
        )
    if head_seq < last:
        return failed(checked, head_seq + 1, f"records after the head (seq {head_seq})")
    if head_hash != prev_hash:
        return failed(checked, head_seq or None, "head hash does not match the last record")
    return VerifyResult(ok=True, checked=checked, first_bad_seq=None, reason="ok")


def append_entries(conn: sqlite3.Connection, entries: Sequence[Entry],
                   at: Sequence[str] | None = None,
                   segment_records: int = SEGMENT_RECORDS) -> list[tuple[Entry, Row]]:
    """Chain ``entries`` onto the log, inside the caller's write transaction: the head is
    read there, so another process appending to the same file (or a restart) still
    continues the one chain. ``at``: when each event happened (a writer that batches
    passes the times it was handed the records); else now. The open segment is sealed
    once it holds ``segment_records``."""
    head = read_head(conn)
    if head is None:
        raise AuditError("audit_head is missing; run `butler audit verify`")
    seq, prev = head
    written: list[tuple[Entry, Row]] = []
    for i, entry in enumerate(entries):
        seq += 1
        row = entry.row(seq, at[i] if at is not None else now_stamp(), prev)
        written.append((entry, row))
        prev = row[-1]
    if written:
        conn.executemany(INSERT, [row for _, row in written])
        conn.execute("UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1", (seq, prev))
        seal_full(conn, seq, prev, written[-1][1][1], segment_records)
    return written


def _finished_since(conn: sqlite3.Connection, since: str) -> set[str]:
    found: set[str] = set()
    before = conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM audit").fetchone()[0]
    while True:
        rows = conn.execute("SELECT seq, at, kind, task_id FROM audit WHERE seq < ? "
                            "ORDER BY seq DESC LIMIT ?", (before, _PAGE)).fetchall()
        for _, at, kind, task_id in rows:
            if str(at) >= since and kind == "task_finished" and task_id is not None:
                found.add(str(task_id))
        if len(rows) < _PAGE or str(rows[-1][1]) < since:
            return found
        before = rows[-1][0]


def now_stamp() -> str:
    """An audit record's time: UTC, to the microsecond, ``+00:00``."""
    return now_utc_iso()


def failed(checked: int, seq: int | None, reason: str) -> VerifyResult:
    return VerifyResult(ok=False, checked=checked, first_bad_seq=seq, reason=reason)


