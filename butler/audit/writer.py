"""Audit appends from the event loop: records are collected for ``LINGER_SECONDS`` after
the first of a batch, then handed to the audit database's worker as one job, so many
tasks cost one commit instead of one each, and the loop never waits for the disk.

The price is a window of about 25 milliseconds: records queued but not yet committed are
lost if the process is killed (docs/audit.md; final records are written again at start-up,
``butler.engine.recovery``). A clean stop flushes everything.

The backlog (queued and being written) is bounded: when the disk falls behind, ``room``
holds new work at the door until the writer has caught up, instead of memory growing.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Mapping
from typing import Any

from butler.audit.log import AuditLog, append_entries, now_stamp
from butler.audit.record import Entry

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
