"""Checkpoints a busy database's WAL on a thread of its own, so no commit waits for them.

A database whose commits must stay short (the task store) turns SQLite's automatic
checkpoint off; this thread then copies the WAL into the database file (the step that
fsyncs) with its own connection, by ``CheckpointPolicy``.

A WAL starts over from its beginning only when a write finds every frame in it already
checkpointed. Under steady load commits land while each checkpoint runs, so that never
happens by itself, and the WAL would grow until a lull let the next commit cut it back,
a long stall. So once the WAL is past ``restart_frames``, the last few frames are
checkpointed while commits are held (``start_over``, given by whoever commits): the
next commit then starts the WAL over. Unheld checkpoints run back to back first, until
one finds only a few milliseconds' frames, so that the hold is short.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from butler.storage._database import Database

log = logging.getLogger("butler.storage")


@dataclass(frozen=True, slots=True)
class CheckpointPolicy:
    """Look every ``interval`` seconds; checkpoint once ``busy_rows`` rows were committed
    since the last time, or ``idle_seconds`` passed. Past ``restart_frames`` (4 KiB
    pages) the WAL is made to start over, after at most ``catch_up_rounds`` unheld
    checkpoints that each still found more than ``catch_up_frames`` new frames. The WAL
    file is cut back to ``wal_size_limit`` bytes after a checkpoint."""

    interval: float = 0.1
    idle_seconds: float = 0.5
    busy_rows: int = 300
    restart_frames: int = 4096
    catch_up_rounds: int = 3
    catch_up_frames: int = 64
    wal_size_limit: int = 64 * 1024 * 1024

    def pragmas(self) -> tuple[str, ...]:
        """For the writing connection: never checkpoint inside a commit."""
        return ("wal_autocheckpoint=0", f"journal_size_limit={self.wal_size_limit}")


def checkpoint(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """A PASSIVE checkpoint: (busy, frames in the WAL, frames copied into the database).
    PASSIVE never waits for (nor blocks) a writer."""
    busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(busy), int(frames), int(copied)


StartOver = Callable[[sqlite3.Connection, threading.Event], None]


class Checkpointer:
    """The thread. ``committed()`` is the count of rows ever committed; ``start_over(conn,
    stopping)`` checkpoints with ``conn`` (the thread's own) while no commit runs, and
    gives up waiting for that moment once ``stopping`` is set."""

    def __init__(self, db: Database, policy: CheckpointPolicy, committed: Callable[[], int],
                 start_over: StartOver) -> None:
        self._db = db
        self._policy = policy
        self._committed = committed
        self._start_over = start_over
        self._stop = threading.Event()
        self.failures = 0
        self._finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, name=f"storage-{db.name}-checkpoint",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        policy = self._policy
        conn = sqlite3.connect(self._db.path, isolation_level=None)
        try:
            last, seen = time.monotonic(), 0
            while not self._stop.wait(policy.interval):
                now, committed = time.monotonic(), self._committed()
                if committed - seen < policy.busy_rows and now - last < policy.idle_seconds:
                    continue
                last, seen = now, committed
                try:
                    _, frames, copied = checkpoint(conn)
                    if frames > policy.restart_frames:
                        catch_up(conn, copied, policy)
                        self._start_over(conn, self._stop)
                except sqlite3.Error as exc:
                    self.failures += 1
                    log.warning("%s: checkpoint failed (%d so far): %s", self._db.name,
                                self.failures, exc)
        finally:
            conn.close()
            self._finished.set_result(None)

    async def stop(self) -> None:
        """Ends the thread; a checkpoint in progress is the most it waits for."""
        self._stop.set()
        await asyncio.wrap_future(self._finished)
        self._thread.join()  # it has nothing left to do but return


def catch_up(conn: sqlite3.Connection, copied: int, policy: CheckpointPolicy) -> None:
    """Checkpoint again, unheld, while each round still finds many new frames, so the
    held checkpoint copies only the last few milliseconds' frames."""
    for _ in range(policy.catch_up_rounds):
        _, _, now = checkpoint(conn)
        fresh = now - copied  # frames written during the round before this one
        if fresh < 0 or fresh <= policy.catch_up_frames:  # started over, or nearly done
            return
        copied = now


def wait_unless(done: concurrent.futures.Future[Any], stopping: threading.Event) -> bool:
    """Wait for ``done`` on a thread that must never outwait a closing database (nor a
    loop that is stopping and joins this thread); whether it came."""
    while True:
        try:
            done.result(timeout=0.05)
            return True
        except concurrent.futures.TimeoutError:
            if stopping.is_set():
                return False
