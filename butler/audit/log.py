"""Append-only, hash-chained audit trail in SQLite.

Every record carries the SHA-256 of its own canonical JSON encoding (which includes the
previous record's hash), and a one-row ``audit_head`` table remembers the last seq and hash
so that truncation is detected too. See docs/audit.md for what this does and does not prove.

The file is served by the audit database's worker (``butler.storage``). The methods here
block until it answers, for the CLI and tests; they refuse to run on an event loop's
thread. Callers pass identities (agent ids, task ids), never tokens: nothing here accepts
a secret.

The daemon appends through ``AuditWriter``, from the event loop: records are collected for
``LINGER_SECONDS`` after the first of a batch, then handed to the audit database's worker
as one job, so many tasks cost one commit instead of one each, and the loop never waits
for the disk.

The price is a window of about 25 milliseconds: records queued but not yet committed are
lost if the process is killed (docs/audit.md; final records are written again at start-up,
``butler.engine.recovery``). A clean stop flushes everything.

The backlog (queued and being written) is bounded: when the disk falls behind, ``room``
holds new work at the door until the writer has caught up, instead of memory growing.
"""

from __future__ import annotations

import asyncio
import json
import logging
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
from internal.signing import NotCanonical

__all__ = ["GENESIS_HASH", "AuditError", "AuditLog", "AuditRecord", "AuditWriter", "VerifyResult"]

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


@dataclass(frozen=True)
class DelegationOutcome:
    """One ``delegation_result`` record: the peer, the error code (None: it answered) and
    how long the call took."""

    peer: str
    code: str | None
    seconds: float | None


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

    async def delegations_since(self, since: datetime,
                                most: int) -> list[DelegationOutcome]:
        """The delegations answered (or failed) since ``since``, newest first, among the
        last ``most`` records at most: what the dashboard's per-peer statistics are made
        of, so they survive a restart."""
        return await self.db.run(_delegations_since,
                                 since.isoformat(timespec="microseconds"), most)

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
    return {str(row[2]) for row in _read_back(conn, since)
            if row[1] == "task_finished" and row[2] is not None}


def _delegations_since(conn: sqlite3.Connection, since: str,
                       most: int) -> list[DelegationOutcome]:
    found = []
    for _, kind, _, code, detail in _read_back(conn, since, most):
        if kind == "delegation_result":
            facts = json.loads(detail)
            seconds = facts.get("seconds")
            found.append(DelegationOutcome(
                str(facts.get("peer", "?")), code,
                float(seconds) if isinstance(seconds, int | float | str) else None))
    return found


def _read_back(conn: sqlite3.Connection, since: str,
               most: int | None = None) -> Iterator[tuple[Any, ...]]:
    """(at, kind, task_id, code, detail) of the records stamped at or after ``since``,
    newest first: read back from the end, in pages, until the records are older (stamps
    follow seq, give or take a clock step, which ``since`` leaves room for), or ``most``
    records have been read."""
    before = conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM audit").fetchone()[0]
    read = 0
    while True:
        rows = conn.execute("SELECT seq, at, kind, task_id, code, detail FROM audit "
                            "WHERE seq < ? ORDER BY seq DESC LIMIT ?",
                            (before, _PAGE)).fetchall()
        for _, at, kind, task_id, code, detail in rows:
            if str(at) >= since:
                yield at, kind, task_id, code, detail
        read += len(rows)
        if len(rows) < _PAGE or str(rows[-1][1]) < since or (most and read >= most):
            return
        before = rows[-1][0]


def now_stamp() -> str:
    """An audit record's time: UTC, to the microsecond, ``+00:00``."""
    return now_utc_iso()


def failed(checked: int, seq: int | None, reason: str) -> VerifyResult:
    return VerifyResult(ok=False, checked=checked, first_bad_seq=seq, reason=reason)


log = logging.getLogger("butler.audit")
MAX_BATCH = 512
LINGER_SECONDS = 0.02
MAX_BACKLOG = 20_000  # records; ~10 MB at most


class AuditWriter:
    def __init__(self, audit: AuditLog, max_backlog: int = MAX_BACKLOG) -> None:
        self._audit = audit
        self._max_backlog = max_backlog
        self.backlog = 0  # records submitted and not yet written (or failed)
        self._caught_up: asyncio.Future[None] | None = None
        # Each record with the time it was handed over: the time of its event, not of
        # the batch that writes it.
        self._pending: list[tuple[dict[str, Any], str]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._in_flight: set[asyncio.Future[Any]] = set()
        self.failed_batches = 0  # counted on the loop
        self.failed_records = 0  # counted on the worker

    def submit(self, kind: str, fields: dict[str, Any]) -> None:
        """On the loop; returns at once. ``fields`` may hold ``at``, the ``datetime`` of an
        event from the past (a record recovered at start-up); else the event is now."""
        stamp = now_stamp()
        if "at" in fields:
            fields = dict(fields)
            stamp = fields.pop("at").isoformat(timespec="microseconds")
        self._pending.append(({"kind": kind, **fields}, stamp))
        self.backlog += 1
        if len(self._pending) >= MAX_BATCH:
            self._hand_over()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(LINGER_SECONDS,
                                                                self._hand_over)

    def _hand_over(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, []
        if not batch:
            return
        done = asyncio.wrap_future(self._audit.db.submit(self._write, batch, write=True))
        self._in_flight.add(done)
        done.add_done_callback(lambda d: self._written(d, len(batch)))

    def _written(self, done: asyncio.Future[Any], records: int) -> None:
        self._in_flight.discard(done)
        self.backlog -= records
        if not done.cancelled() and done.exception() is not None:
            self.failed_batches += 1
            log.error("audit batch not written: %s", done.exception())
        # Let work in again once half the room is free, not at every record written.
        if self._caught_up is not None and self.backlog <= self._max_backlog // 2:
            if not self._caught_up.done():
                self._caught_up.set_result(None)
            self._caught_up = None

    async def room(self) -> None:
        """Returns at once unless the backlog is full; then once it is half empty. Called
        where new work comes in (``TaskEngine``), so what is running can still record."""
        if self.backlog < self._max_backlog:
            return
        if self._caught_up is None:
            self._caught_up = asyncio.get_running_loop().create_future()
            log.warning("audit writer %d records behind: new tasks wait for it",
                        self.backlog)
        self._hand_over()  # everything queued goes to the worker now
        await asyncio.shield(self._caught_up)

    async def flush(self) -> None:
        """Returns once everything submitted so far is committed."""
        self._hand_over()
        if self._in_flight:
            await asyncio.wait(list(self._in_flight))

    async def close(self) -> None:
        await self.flush()

    def _write(self, conn: sqlite3.Connection,
               batch: list[tuple[Mapping[str, Any], str]]) -> None:
        """On the worker, in its transaction. One bad record must not take the rest of
        its batch with it: on failure each record is tried on its own."""
        conn.execute("SAVEPOINT audit_batch")
        try:
            append_entries(conn, [Entry(**entry) for entry, _ in batch],
                           [at for _, at in batch], self._audit.segment_records)
        except Exception:
            conn.execute("ROLLBACK TO audit_batch")
        else:
            conn.execute("RELEASE audit_batch")
            return
        conn.execute("RELEASE audit_batch")
        for entry, at in batch:
            conn.execute("SAVEPOINT audit_entry")
            try:
                append_entries(conn, [Entry(**entry)], [at], self._audit.segment_records)
            except Exception:
                conn.execute("ROLLBACK TO audit_entry")
                self.failed_records += 1
                log.exception("could not write audit record %s", entry.get("kind"))
            conn.execute("RELEASE audit_entry")
