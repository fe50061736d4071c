"""Group commits: one writer thread turns every task write queued meanwhile into a
single transaction. Each caller still waits for its own commit, so "acknowledged only
after committed" holds, but N concurrent tasks pay for one commit instead of N."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("butler.engine")
MAX_BATCH = 512

_Waiter = tuple[Any, asyncio.Future[None]]


class BatchWriter:
    """``submit`` queues one item and returns a future resolved once it is committed;
    each item is written by running ``statement`` with the parameters ``encode`` makes."""

    def __init__(self, path: Path, statement: str,
                 encode: Callable[[Any], tuple[Any, ...]]) -> None:
        self._statement = statement
        self._encode = encode
        self._queue: queue.SimpleQueue[_Waiter | None] = queue.SimpleQueue()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA busy_timeout=10000")
        # Per connection, not per file: without it this one would fsync every commit.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._thread = threading.Thread(target=self._run, name="task-writer", daemon=True)
        self._thread.start()

    def submit(self, item: Any) -> asyncio.Future[None]:
        """Call on the event loop; the future is settled there after the commit."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put((item, done))
        return done

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._db.close()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            _settle_later([done for _, done in batch], self._commit(batch))
            if stop:
                return

    def _commit(self, batch: list[_Waiter]) -> Exception | None:
        try:
            rows = [self._encode(item) for item, _ in batch]
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(self._statement, rows)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except Exception as exc:
            log.exception("task store write failed for %d task(s)", len(batch))
            return exc
        return None


def _settle_later(waiters: list[asyncio.Future[None]], error: Exception | None) -> None:
    # One wake-up of the loop per batch rather than one per task.
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for done in waiters:
        by_loop.setdefault(done.get_loop(), []).append(done)
    for loop, futures in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody is waiting
            loop.call_soon_threadsafe(_settle, futures, error)


def _settle(waiters: list[asyncio.Future[None]], error: Exception | None) -> None:
    for done in waiters:
        if done.cancelled():
            continue  # its caller gave up waiting; the write itself stands
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)
