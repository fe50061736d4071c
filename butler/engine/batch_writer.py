"""Group commits: one writer thread turns every task write queued meanwhile into a
single transaction. Each caller still waits for its own commit, so "acknowledged only
after committed" holds, but N concurrent tasks pay for one commit instead of N."""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

log = logging.getLogger("butler.engine")
MAX_BATCH = 512

Statement = tuple[str, tuple[Any, ...]]


class BatchWriter:
    """``submit`` queues one write and returns a future resolved once it is committed."""

    def __init__(self, path: Path, encode: Callable[[Any], Statement]) -> None:
        self._encode = encode
        self._queue: queue.SimpleQueue[tuple[Any, Future[None]] | None] = queue.SimpleQueue()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA busy_timeout=10000")
        # Per connection, not per file: without it this one would fsync every commit.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._thread = threading.Thread(target=self._run, name="task-writer", daemon=True)
        self._thread.start()

    def submit(self, item: Any) -> Future[None]:
        done: Future[None] = Future()
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
            self._commit(batch)
            if stop:
                return

    def _commit(self, batch: list[tuple[Any, Future[None]]]) -> None:
        try:
            statements = [self._encode(item) for item, _ in batch]
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for sql, args in statements:
                    self._db.execute(sql, args)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except Exception as exc:
            log.exception("task store write failed for %d task(s)", len(batch))
            for _, done in batch:
                done.set_exception(exc)
            return
        for _, done in batch:
            done.set_result(None)
