"""Group commits of one upsert, with the writes of one key coalesced.

The writes made during a pass of the event loop are committed two passes later, as one
transaction whose callers are resumed only once it is committed. So "acknowledged only
after committed" holds, and N concurrent tasks pay for one commit instead of N. A write
waits that one whole pass so that a newer write of the same key can take its place: a
task started in one pass takes its first step in the next, and an echo finishes in that
step; it is then written once, finished, not twice. A first write may also be deferred
for longer (``submit``'s ``defer``), so that a task finishing within a few milliseconds
(a delegation to a peer) is written once too.

Where the commit runs is the writer's mode:

- on the worker (the default): the batch is handed to the database's worker as one job;
  batches handed over while it is still committing are committed together, in its next
  transaction (``Database``).
- on the loop (``commit_on_loop``): the loop commits each batch itself, on a connection of
  its own, and settles its callers at once. The one exception to "the loop never calls
  SQLite": a commit is a WAL append without fsync (``synchronous=NORMAL``, checkpoints on
  their own thread), a fraction of a millisecond, and it spares the two thread hand-offs
  per batch that the worker costs; the task store, whose commits are on every request's
  path, uses it. To start the WAL over, the checkpointer asks the loop to hold its
  commits (the loop runs on; only acknowledgements wait) for one short checkpoint.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from butler.storage._checkpointer import Checkpointer, CheckpointPolicy, checkpoint, wait_unless
from butler.storage._database import Database, DatabaseClosed

log = logging.getLogger("butler.storage")
Row = Sequence[Any]  # a statement's parameters
# A row, or what makes it when its commit comes (a write that may be replaced first is
# never made); what it raises then fails that write alone.
Item = Row | Callable[[], Row]
# Called inside each commit's transaction, before its rows are made, with its items: what
# a group of rows shares is made there, once per commit (the task store's receipt log).
Prepare = Callable[[sqlite3.Connection, Sequence[Item]], None]
Waiting = list[tuple[Hashable, asyncio.Future[None]]]


class _Batch:
    __slots__ = ("items", "waiting")

    def __init__(self) -> None:
        self.items: dict[Hashable, Item] = {}
        self.waiting: Waiting = []

    def add(self, key: Hashable, item: Item, done: asyncio.Future[None]) -> None:
        self.items[key] = item
        self.waiting.append((key, done))

    def take(self, key: Hashable, item: Item, waiting: list[asyncio.Future[None]]) -> None:
        self.items[key] = item
        self.waiting += [(key, done) for done in waiting]

    def merge(self, other: _Batch) -> None:
        self.items.update(other.items)
        self.waiting += other.waiting


class BatchWriter:
    """``submit`` (on the loop) queues one row (the parameters of ``statement``) under a
    key and returns a future resolved once it is committed. Of the rows queued with one
    key, only the last is written: the statement must be an upsert for which the last
    write wins anyway. A row is made by its caller, before it is queued, or given as
    what makes it at its commit (a write likely to be replaced first); one that cannot be
    made then is left out of the commit and fails its own callers alone. With
    a ``checkpoints`` policy the database's WAL is checkpointed by a ``Checkpointer``
    thread; the database must then have been opened with ``policy.pragmas()``.
    ``commit_on_loop``: see the module doc; construct the writer on the loop that will
    submit to it. ``prepare``: see ``Prepare``; what it raises fails the whole commit."""

    def __init__(self, db: Database, statement: str, *,
                 checkpoints: CheckpointPolicy | None = None,
                 commit_on_loop: bool = False, prepare: Prepare | None = None) -> None:
        self._db = db
        self._statement = statement
        self._prepare = prepare
        # Writes of the current pass, and those of the pass before, due at the next tick.
        self._next = _Batch()
        self._due = _Batch()
        self._ticking = False
        # Deferred first writes (see ``submit``), oldest first: deadline, futures, item.
        self._later: dict[Hashable, tuple[float, list[asyncio.Future[None]], Item]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._in_flight: set[asyncio.Future[Any]] = set()
        self.committed = 0  # rows, ever; only the committing thread writes it
        self._loop_db: sqlite3.Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._held = False  # loop mode: commits wait while the checkpointer empties the WAL
        self._parked = _Batch()  # loop mode: batches due while held
        start_over = self._start_over_on_worker
        if commit_on_loop:
            self._loop = asyncio.get_running_loop()
            self._loop_db = _loop_connection(db, checkpoints)
            start_over = self._start_over_on_loop
        self._checkpointer = None if checkpoints is None else \
            Checkpointer(db, checkpoints, lambda: self.committed, start_over)

    def submit(self, key: Hashable, item: Item, defer: float = 0.0) -> asyncio.Future[None]:
        """``defer``: a first write of its key may wait up to that many seconds for a newer
        one to take its place, so that both cost one commit; a newer write then commits at
        the next tick, settling both futures."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
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
        if not self._ticking:
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
        self._hand_over(self._due)
        self._due, self._next = self._next, _Batch()
        if self._due.waiting:
            self._schedule(asyncio.get_running_loop())

    def flush(self) -> None:
        """Commit (or hand to the worker) everything queued now; on the loop."""
        batch = self._due
        batch.merge(self._next)  # no key waits in two places (see ``submit``)
        for key, (_, waiting, item) in self._later.items():
            batch.take(key, item, waiting)
        self._later.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due, self._next = _Batch(), _Batch()
        self._hand_over(batch)

    def _hand_over(self, batch: _Batch) -> None:
        if not batch.waiting:
            return
        if self._loop_db is not None:
            self._commit_on_loop(self._loop_db, batch)
            return
        committed = asyncio.wrap_future(
            self._db.submit(self._commit, batch.items, write=True))
        self._in_flight.add(committed)
        committed.add_done_callback(lambda f: self._settle(f, batch.waiting))

    def _settle(self, committed: asyncio.Future[dict[Hashable, Exception]],
                waiting: Waiting) -> None:
        self._in_flight.discard(committed)
        error = committed.exception()
        if error is not None:
            log.error("%s: write failed for %d item(s): %s", self._db.name, len(waiting),
                      error)
        _resume(waiting, error, {} if error is not None else committed.result())

    def _commit(self, conn: sqlite3.Connection,
                items: dict[Hashable, Item]) -> dict[Hashable, Exception]:
        """Inside a transaction: on the worker, or on the loop in loop mode. Returns the
        writes whose rows could not be made, each with why; the rest are written."""
        rows: list[Row] = []
        unmade: dict[Hashable, Exception] = {}
        if self._prepare is not None:
            self._prepare(conn, list(items.values()))
        for key, item in items.items():
            try:
                rows.append(item() if callable(item) else item)
            except Exception as exc:
                unmade[key] = exc
        conn.executemany(self._statement, rows)
        self.committed += len(rows)  # counted before COMMIT: only a checkpoint hint
        return unmade

    # -- loop mode ---------------------------------------------------------------------

    def _commit_on_loop(self, conn: sqlite3.Connection, batch: _Batch) -> None:
        if self._held:
            self._parked.merge(batch)  # newer writes of a key replace older ones
            return
        error: Exception | None = None
        unmade: dict[Hashable, Exception] = {}
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                unmade = self._commit(conn, batch.items)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except Exception as exc:
            log.exception("%s: write failed for %d item(s)", self._db.name, len(batch.items))
            error = exc
        _resume(batch.waiting, error, unmade)

    def _hold(self, held: concurrent.futures.Future[None]) -> None:
        """On the loop: no commit from now until ``_release``."""
        self._held = True
        held.set_result(None)

    def _release(self) -> None:
        self._held = False
        parked, self._parked = self._parked, _Batch()
        if self._loop_db is not None:
            self._commit_on_loop(self._loop_db, parked)

    def _start_over_on_loop(self, conn: sqlite3.Connection, stopping: threading.Event) -> None:
        """On the checkpointer's thread: hold the loop's commits, checkpoint, release."""
        assert self._loop is not None
        held: concurrent.futures.Future[None] = concurrent.futures.Future()
        try:
            self._loop.call_soon_threadsafe(self._hold, held)
        except RuntimeError:  # the loop is closed: nothing commits any more
            return
        if not wait_unless(held, stopping):
            return
        try:
            checkpoint(conn)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._release)

    def _start_over_on_worker(self, conn: sqlite3.Connection,
                              stopping: threading.Event) -> None:
        """On the checkpointer's thread: the checkpoint runs as a job on the worker, where
        no commit runs beside it."""
        with contextlib.suppress(DatabaseClosed):
            wait_unless(self._db.submit(checkpoint), stopping)

    async def close(self) -> None:
        """After the last ``submit``: commits what is queued, then stops checkpointing."""
        self.flush()
        if self._in_flight:
            await asyncio.wait(list(self._in_flight))
        if self._checkpointer is not None:
            await self._checkpointer.stop()
        if self._loop_db is not None:
            self._release()  # a hold the checkpointer never lifted
            self._loop_db.close()
            self._loop_db = None


def _resume(waiting: Waiting, error: BaseException | None,
            unmade: dict[Hashable, Exception]) -> None:
    """``error``: the commit's, for every caller; ``unmade``: the writes left out of it."""
    # Newest first: a task's outcome resumes its run, which settles the task, before the
    # task's first write resumes the caller, which then finds it settled (one pass less).
    for key, done in reversed(waiting):
        if done.cancelled():
            continue  # its caller gave up waiting; the write itself stands
        failed = error or unmade.get(key)
        if failed is None:
            done.set_result(None)
        else:
            done.set_exception(failed)


def _loop_connection(db: Database, checkpoints: CheckpointPolicy | None) -> sqlite3.Connection:
    """The loop's own connection, to a file ``db`` has already opened (and made private)."""
    conn = sqlite3.connect(db.path, isolation_level=None)
    # Short: the loop waits on this lock. Other writers hold it for milliseconds.
    conn.execute("PRAGMA busy_timeout=2000")
    # Per connection, not per file: without it this one would fsync every commit.
    conn.execute("PRAGMA synchronous=NORMAL")
    for pragma in checkpoints.pragmas() if checkpoints is not None else ():
        conn.execute(f"PRAGMA {pragma}")
    return conn
