"""Group commits of one upsert, with the writes of one key coalesced.

The writes made during a pass of the event loop are handed to the database's worker two
passes later, as one job: one transaction, whose callers are resumed only once it is
committed. So "acknowledged only after committed" holds, and N concurrent tasks pay for
one commit instead of N. A write waits that one whole pass so that a newer write of the
same key can take its place: a task started in one pass takes its first step in the next,
and an echo finishes in that step; it is then written once, finished, not twice. A first
write may also be deferred for longer (``submit``'s ``defer``), so that a task finishing
within a few milliseconds (a delegation to a peer) is written once too. Batches handed
over while the worker is still committing the one before are committed together, in the
worker's next transaction (``Database``).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Hashable
from typing import Any

from butler.storage._checkpointer import Checkpointer, CheckpointPolicy
from butler.storage._database import Database

log = logging.getLogger("butler.storage")


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
    must be an upsert for which the last write wins anyway. With a ``checkpoints``
    policy the database's WAL is checkpointed by a ``Checkpointer`` thread; the database
    must then have been opened with ``policy.pragmas()``."""

    def __init__(self, db: Database, statement: str, encode: Callable[[Any], tuple[Any, ...]],
                 key: Callable[[Any], Hashable] = id,
                 checkpoints: CheckpointPolicy | None = None) -> None:
        self._db = db
        self._statement = statement
        self._encode = encode
        self._key = key
        # Writes of the current pass, and those of the pass before, due at the next tick.
        self._next = _Batch()
        self._due = _Batch()
        self._ticking = False
        # Deferred first writes (see ``submit``), oldest first: deadline, futures, item.
        self._later: dict[Hashable, tuple[float, list[asyncio.Future[None]], Any]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._in_flight: set[asyncio.Future[Any]] = set()
        self.committed = 0  # rows, ever; only the worker writes it
        self._checkpointer = None if checkpoints is None else \
            Checkpointer(db, checkpoints, lambda: self.committed)

    def submit(self, item: Any, defer: float = 0.0) -> asyncio.Future[None]:
        """``defer``: a first write of its key may wait up to that many seconds for a newer
        one to take its place, so that both cost one commit; a newer write then commits at
        the next tick, settling both futures."""
        loop = asyncio.get_running_loop()
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
        """Once per pass while writes wait: hand the due batch over; the next becomes due."""
        self._ticking = False
        self._hand_over(self._due)
        self._due, self._next = self._next, _Batch()
        if self._due.waiting:
            self._schedule(asyncio.get_running_loop())

    def flush(self) -> None:
        """Hand everything queued now to the worker (on the loop)."""
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
        committed = asyncio.wrap_future(
            self._db.submit(self._commit, list(batch.items.values()), write=True))
        self._in_flight.add(committed)
        committed.add_done_callback(lambda f: self._settle(f, batch.waiting))

    def _settle(self, committed: asyncio.Future[Any],
                waiting: list[asyncio.Future[None]]) -> None:
        self._in_flight.discard(committed)
        error = committed.exception()
        if error is not None:
            log.error("%s: write failed for %d item(s): %s", self._db.name, len(waiting),
                      error)
        # Newest first: a task's outcome resumes its run, which settles the task, before the
        # task's first write resumes the caller, which then finds it settled (one pass less).
        for done in reversed(waiting):
            if done.cancelled():
                continue  # its caller gave up waiting; the write itself stands
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

    def _commit(self, conn: sqlite3.Connection, items: list[Any]) -> None:
        """On the worker, inside its transaction."""
        conn.executemany(self._statement, [self._encode(item) for item in items])
        self.committed += len(items)  # counted before COMMIT: only a checkpoint hint

    async def close(self) -> None:
        """After the last ``submit``: commits what is queued, then stops checkpointing."""
        self.flush()
        if self._in_flight:
            await asyncio.wait(list(self._in_flight))
        if self._checkpointer is not None:
            await self._checkpointer.stop()

