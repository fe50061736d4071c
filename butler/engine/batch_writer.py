"""Group commits on the event loop: the task writes made during a pass of the loop are
committed in one transaction two passes later, and only then are their callers resumed.
So "acknowledged only after committed" holds, and N concurrent tasks pay for one commit
instead of N. A write waits that one whole pass so that a newer write of the same key
can take its place: a task started in one pass takes its first step in the next, and an
echo finishes in that step; it is then written once, finished, not twice. A first write
may also be deferred for longer (``submit``'s ``defer``), so that a task finishing within
a few milliseconds (a delegation to a peer) is written once too.

The commit runs on the loop thread on purpose. A writer thread shares the interpreter
(and, when pinned, the one core) with the loop, so it bought no parallelism; it cost two
thread hand-offs per write, and at one request at a time those hand-offs were most of a
task's latency (docs/performance.md). A commit here is a WAL append without fsync
(``synchronous=NORMAL``): a fraction of a millisecond. The slow part, checkpointing the
WAL into the database file (which does fsync), runs on a thread with its own connection,
so the loop never waits for the disk to flush.

A WAL starts over from its beginning only when a write finds every frame in it already
checkpointed. Under steady load the loop commits while each checkpoint runs, so that
never happened: the WAL grew by hundreds of megabytes, and the first commit after a lull
cut it back (``journal_size_limit``), stalling the loop for 100-300 ms. So once the WAL is
past ``RESTART_FRAMES``, the checkpointer asks the loop to hold its commits (the loop runs
on; only acknowledgements wait), checkpoints the few frames left, and lets the loop go:
its next commit starts the WAL over. The hold lasts as long as that last checkpoint, so
unheld ones run back to back first, until one finds only the frames of a few milliseconds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

log = logging.getLogger("butler.engine")
# The checkpointer looks every CHECKPOINT_SECONDS and checkpoints once BUSY_ROWS rows have
# been committed since the last time, or IDLE_CHECKPOINT_SECONDS have passed. Under heavy
# load each checkpoint stays small (half a second of writes took 15-25 ms of CPU, one
# burst on the loop's core); under light load each fsync is spared (docs/performance.md).
CHECKPOINT_SECONDS = 0.1
IDLE_CHECKPOINT_SECONDS = 0.5
BUSY_ROWS = 300
# A WAL past this many frames (4 KiB pages: 16 MiB) is made to start over (module doc).
RESTART_FRAMES = 4096
# Before a start-over, unheld checkpoints are repeated (at most this many times) while a
# round finds more than this many frames written during the one before it.
CATCH_UP_ROUNDS = 3
CATCH_UP_FRAMES = 64
# Past this the WAL file is cut back after a checkpoint instead of kept at its peak size.
WAL_SIZE_LIMIT = 64 * 1024 * 1024


def _checkpoint(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """A PASSIVE checkpoint: (busy, frames in the WAL, frames copied into the database)."""
    busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(busy), int(frames), int(copied)


class _Batch:
    __slots__ = ("items", "waiting")

    def __init__(self) -> None:
        self.items: dict[Hashable, Any] = {}
        self.waiting: list[asyncio.Future[None]] = []

    def add(self, key: Hashable, item: Any, done: asyncio.Future[None]) -> None:
        self.items[key] = item
        self.waiting.append(done)

    def take(self, key: Hashable, item: Any, waiting: list[asyncio.Future[None]]) -> None:
        self.items[key] = item
        self.waiting += waiting

    def merge(self, other: _Batch) -> None:
        self.items.update(other.items)
        self.waiting += other.waiting


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
        # Writes of the current pass, and those of the pass before, due at the next tick.
        self._next = _Batch()
        self._due = _Batch()
        self._ticking = False
        self._held = False  # commits wait while the checkpointer empties the WAL
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop that writes
        # Deferred first writes (see ``submit``), oldest first: deadline, futures, item.
        self._later: dict[Hashable, tuple[float, list[asyncio.Future[None]], Any]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        # Short: the loop waits on this lock. Other writers hold it for milliseconds.
        self._db.execute("PRAGMA busy_timeout=2000")
        # Per connection, not per file: without it this one would fsync every commit.
        self._db.execute("PRAGMA synchronous=NORMAL")
        # Checkpoints run on the checkpointer's connection, never inside a commit here.
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        self._db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        self._committed = 0  # rows, ever; only the loop writes it
        self._stop = threading.Event()
        self._checkpointer = threading.Thread(target=self._checkpoint_loop, args=(path,),
                                              name="task-checkpoint", daemon=True)
        self._checkpointer.start()

    def submit(self, item: Any, defer: float = 0.0) -> asyncio.Future[None]:
        """``defer``: a first write of its key may wait up to that many seconds for a newer
        one to take its place, so that both cost one commit; a newer write then commits at
        the next tick, settling both futures."""
        loop = self._loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        key = self._key(item)
        # A write not committed yet is replaced, in whichever batch it waits.
        if key in self._due.items:
            self._due.add(key, item, done)
        elif key in self._later:
            # The older write waited long enough: its replacement is due at once.
            self._due.take(key, item, self._later.pop(key)[1] + [done])
        elif defer > 0 and key not in self._next.items:
            deadline = loop.time() + defer
            self._later[key] = (deadline, [done], item)
            if self._timer is None:
                self._timer = loop.call_at(deadline, self._expire)
            return done
        else:
            self._next.add(key, item, done)
        self._schedule(loop)
        return done

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._ticking and not self._held:
            self._ticking = True
            loop.call_soon(self._tick)

    def _expire(self) -> None:
        """Deferred writes whose time is up join the next batch."""
        loop = asyncio.get_running_loop()
        self._timer = None
        now = loop.time()
        while self._later:
            key = next(iter(self._later))
            deadline, waiting, item = self._later[key]
            if deadline > now:  # deferred in order, with one delay: the rest wait longer
                self._timer = loop.call_at(deadline, self._expire)
                break
            del self._later[key]
            self._next.take(key, item, waiting)
        if self._next.waiting:
            self._schedule(loop)

    def _tick(self) -> None:
        """Once per pass while writes wait: commit the due batch; the next becomes due."""
        self._ticking = False
        if self._held:
            return  # ``_release`` ticks again
        self._flush(self._due)
        self._due, self._next = self._next, _Batch()
        if self._due.waiting:
            self._schedule(asyncio.get_running_loop())

    def _hold(self, held: concurrent.futures.Future[None]) -> None:
        """On the loop: no commit from now until ``_release``."""
        self._held = True
        held.set_result(None)

    def _release(self) -> None:
        self._held = False
        if self._due.waiting or self._next.waiting:
            self._schedule(asyncio.get_running_loop())

    def flush(self) -> None:
        """Commit everything queued now (on the loop); settles each caller's future."""
        batch = self._due
        batch.merge(self._next)  # no key waits in two places (see ``submit``)
        for key, (_, waiting, item) in self._later.items():
            batch.take(key, item, waiting)
        self._later.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due, self._next = _Batch(), _Batch()
        self._flush(batch)

    def _flush(self, batch: _Batch) -> None:
        if not batch.waiting:
            return
        error = self._commit(list(batch.items.values()))
        # Newest first: a task's outcome resumes its run, which settles the task, before the
        # task's first write resumes the caller, which then finds it settled (one pass less).
        for done in reversed(batch.waiting):
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
                self._committed += len(rows)  # read by the checkpointer
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
            last, seen = time.monotonic(), 0
            while not self._stop.wait(CHECKPOINT_SECONDS):
                now, committed = time.monotonic(), self._committed
                if committed - seen < BUSY_ROWS and now - last < IDLE_CHECKPOINT_SECONDS:
                    continue
                last, seen = now, committed
                try:
                    _, frames, copied = _checkpoint(conn)
                    if frames > RESTART_FRAMES:
                        self._catch_up(conn, copied)
                        self._start_over(conn)
                except sqlite3.Error as exc:
                    log.warning("task store checkpoint failed: %s", exc)
        finally:
            conn.close()

    @staticmethod
    def _catch_up(conn: sqlite3.Connection, copied: int) -> None:
        """Checkpoint again, unheld, while each round still finds many new frames: the
        held checkpoint then copies only the last few milliseconds' frames, and commits
        wait about 4 ms for it instead of 10 (docs/performance.md)."""
        for _ in range(CATCH_UP_ROUNDS):
            _, _, now = _checkpoint(conn)
            fresh = now - copied  # frames written during the round before this one
            if fresh < 0 or fresh <= CATCH_UP_FRAMES:  # started over meanwhile, or nearly done
                return
            copied = now

    def _start_over(self, conn: sqlite3.Connection) -> None:
        """Checkpoint the WAL's last frames while the loop holds its commits (module doc)."""
        loop = self._loop
        if loop is None:
            return
        held: concurrent.futures.Future[None] = concurrent.futures.Future()
        try:
            loop.call_soon_threadsafe(self._hold, held)
        except RuntimeError:  # the loop is closed: nothing writes any more
            return
        while True:  # never wait for a loop that is stopping: it joins this thread
            try:
                held.result(timeout=0.05)
                break
            except concurrent.futures.TimeoutError:
                if self._stop.is_set():
                    return
        try:
            _checkpoint(conn)
        finally:
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(self._release)

    def close(self) -> None:
        """On the loop, after the last ``submit``: commits what is queued, then stops."""
        self.flush()
        self._stop.set()
        self._checkpointer.join()
        self._db.close()
