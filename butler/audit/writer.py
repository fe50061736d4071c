"""Audit appends off the event loop: a thread that batches queued records into one
transaction each, so many tasks cost one fsync instead of one each.

The price is a window of about 25 milliseconds: records queued but not yet committed are
lost if the process is killed (docs/audit.md). A clean stop flushes everything.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from butler.audit.log import AuditLog

log = logging.getLogger("butler.audit")
MAX_BATCH = 512
LINGER_SECONDS = 0.02


class _Flush:
    def __init__(self) -> None:
        self.done = threading.Event()


class AuditWriter:
    def __init__(self, audit: AuditLog) -> None:
        self._audit = audit
        self._queue: queue.SimpleQueue[dict[str, Any] | _Flush | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._thread.start()

    def submit(self, kind: str, fields: dict[str, Any]) -> None:
        self._queue.put({"kind": kind, **fields})

    def flush(self, timeout: float = 10.0) -> bool:
        """Block until everything queued so far is committed."""
        marker = _Flush()
        self._queue.put(marker)
        return marker.done.wait(timeout)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch: list[dict[str, Any]] = []
            flushes: list[_Flush] = []
            item = self._queue.get()
            # Linger a moment so one wake-up writes many records: each wake-up competes
            # with the event loop for the interpreter, and each commit costs a write.
            time.sleep(LINGER_SECONDS)
            while True:
                if item is None:
                    stopping = True
                elif isinstance(item, _Flush):
                    flushes.append(item)
                else:
                    batch.append(item)
                if stopping or len(batch) >= MAX_BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._write(batch)
            for marker in flushes:
                marker.done.set()

    def _write(self, batch: list[dict[str, Any]]) -> None:
        if not batch:
            return
        try:
            self._audit.write_many(batch)
        except Exception:
            # One bad record must not take the rest of its batch with it.
            for entry in batch:
                try:
                    self._audit.write_many([entry])
                except Exception:
                    log.exception("could not write audit record %s", entry.get("kind"))
