"""Group commits on the event loop: every task write made during a pass of the loop (and
the pass after it) is committed in one transaction, and only then are its callers
resumed. So "acknowledged only after committed" holds, and N concurrent tasks pay for
one commit instead of N. Writes with the same key in one batch (two states of one task,
when it finished within the pass that started it) are written once, as the latest.

The commit runs on the loop thread on purpose. A writer thread shares the interpreter
(and, when pinned, the one core) with the loop, so it bought no parallelism; it cost two
thread hand-offs per write, and at one request at a time those hand-offs were most of a
task's latency (docs/performance.md). A commit here is a WAL append without fsync
(``synchronous=NORMAL``): a fraction of a millisecond. The slow part, checkpointing the
WAL into the database file (which does fsync), runs on a thread with its own connection,
so the loop never waits for the disk to flush.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

log = logging.getLogger("butler.engine")
CHECKPOINT_SECONDS = 0.5
# Past this the WAL file is cut back after a checkpoint instead of kept at its peak size.
WAL_SIZE_LIMIT = 64 * 1024 * 1024


class BatchWriter:
    """``submit`` (on the loop) queues one item and returns a future resolved once it is
    committed; each item is written by running ``statement`` with ``encode(item)``. Of
    the items queued with one ``key(item)``, only the last is written: the statement
    must be an upsert for which the last write wins anyway."""

    def __init__(self, path: Path, statement: str, encode: Callable[[Any], tuple[Any, ...]],
                 key: Callable[[Any], Hashable] = id) -> None:
        self._statement = statement
        self._encode = encode
        self._key = key
        self._pending: dict[Hashable, Any] = {}
        self._waiting: list[asyncio.Future[None]] = []
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        # Short: the loop waits on this lock. Other writers hold it for milliseconds.
        self._db.execute("PRAGMA busy_timeout=2000")
        # Per connection, not per file: without it this one would fsync every commit.
        self._db.execute("PRAGMA synchronous=NORMAL")
        # Checkpoints run on the checkpointer's connection, never inside a commit here.
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        self._db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        self._stop = threading.Event()
        self._checkpointer = threading.Thread(target=self._checkpoint_loop, args=(path,),
                                              name="task-checkpoint", daemon=True)
        self._checkpointer.start()

    def submit(self, item: Any) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        if not self._waiting:
            # Two passes on: tasks started in this pass take their first step in the
            # next one, and an echo finishes in it; its final row then replaces the first.
            loop.call_soon(loop.call_soon, self.flush)
        self._pending[self._key(item)] = item
        self._waiting.append(done)
        return done

    def flush(self) -> None:
        """Commit everything queued now (on the loop); settles each caller's future."""
        batch, waiting = self._pending, self._waiting
        if not waiting:
            return
        self._pending, self._waiting = {}, []
        error = self._commit(list(batch.values()))
        for done in waiting:
            if done.cancelled():
                continue  # its caller gave up waiting; the write itself stands
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

    def _commit(self, items: list[Any]) -> Exception | None:
        try:
            rows = [self._encode(item) for item in items]
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(self._statement, rows)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except Exception as exc:
            log.exception("task store write failed for %d task(s)", len(items))
            return exc
        return None

    def _checkpoint_loop(self, path: Path) -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            # PASSIVE never waits for (nor blocks) the loop's writes.
            while not self._stop.wait(CHECKPOINT_SECONDS):
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error as exc:
                    log.warning("task store checkpoint failed: %s", exc)
        finally:
            conn.close()

    def close(self) -> None:
        """On the loop, after the last ``submit``: commits what is queued, then stops."""
        self.flush()
        self._stop.set()
        self._checkpointer.join()
        self._db.close()
