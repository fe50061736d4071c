"""Audit appends from the event loop: records are collected for ``LINGER_SECONDS`` after
the first of a batch, then handed to the audit database's worker as one job, so many
tasks cost one commit instead of one each, and the loop never waits for the disk.

The price is a window of about 25 milliseconds: records queued but not yet committed are
lost if the process is killed (docs/audit.md). A clean stop flushes everything.
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


class AuditWriter:
    def __init__(self, audit: AuditLog) -> None:
        self._audit = audit
        # Each record with the time it was handed over: the time of its event, not of
        # the batch that writes it.
        self._pending: list[tuple[dict[str, Any], str]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._in_flight: set[asyncio.Future[Any]] = set()
        self.failed_batches = 0  # counted on the loop
        self.failed_records = 0  # counted on the worker

    def submit(self, kind: str, fields: dict[str, Any]) -> None:
        """On the loop; returns at once."""
        self._pending.append(({"kind": kind, **fields}, now_stamp()))
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
        done.add_done_callback(self._written)

    def _written(self, done: asyncio.Future[Any]) -> None:
        self._in_flight.discard(done)
        if not done.cancelled() and done.exception() is not None:
            self.failed_batches += 1
            log.error("audit batch not written: %s", done.exception())

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
                           [at for _, at in batch])
        except Exception:
            conn.execute("ROLLBACK TO audit_batch")
        else:
            conn.execute("RELEASE audit_batch")
            return
        conn.execute("RELEASE audit_batch")
        for entry, at in batch:
            conn.execute("SAVEPOINT audit_entry")
            try:
                append_entries(conn, [Entry(**entry)], [at])
            except Exception:
                conn.execute("ROLLBACK TO audit_entry")
                self.failed_records += 1
                log.exception("could not write audit record %s", entry.get("kind"))
            conn.execute("RELEASE audit_entry")
