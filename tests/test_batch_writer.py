"""Group commits on the loop: each caller is answered only after its own commit, writes
made together share one transaction (one row per key), a deferred write waits for a
newer one of its key or for its time to be up, a failed commit fails everyone in it, a
caller that stops waiting does not lose its write, and checkpoints keep the WAL
bounded."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from butler.engine import batch_writer
from butler.engine.batch_writer import BatchWriter

INSERT = "INSERT INTO t(v) VALUES (?)"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "t.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (v INTEGER NOT NULL CHECK (v >= 0))")
    conn.close()
    return path


def committed(path: Path) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [v for (v,) in conn.execute("SELECT v FROM t ORDER BY v")]
    finally:
        conn.close()


async def test_each_caller_is_answered_after_its_commit(db: Path) -> None:
    writer = BatchWriter(db, INSERT, lambda v: (v,))
    try:
        async def put(v: int) -> list[int]:
            await writer.submit(v)
            return committed(db)  # another connection: only what is committed

        seen = await asyncio.gather(*(put(v) for v in range(50)))
        for v, rows in enumerate(seen):
            assert v in rows
        assert committed(db) == list(range(50))
    finally:
        writer.close()


class CountingWriter(BatchWriter):
    def __init__(self, path: Path, key: Any = id) -> None:
        super().__init__(path, INSERT, lambda v: (v,), key=key)
        self.transactions: list[list[int]] = []

    def _commit(self, items: list[Any]) -> Exception | None:
        self.transactions.append(list(items))
        return super()._commit(items)


async def test_writes_made_together_share_one_transaction(db: Path) -> None:
    writer = CountingWriter(db)
    try:
        pending = [writer.submit(v) for v in range(10)]
        assert committed(db) == []  # nothing is committed before the loop gets to it
        await asyncio.gather(*pending)
        await writer.submit(10)
        assert writer.transactions == [list(range(10)), [10]]
    finally:
        writer.close()


async def test_writes_with_one_key_in_one_batch_are_written_once_as_the_last(
        db: Path) -> None:
    writer = BatchWriter(db, INSERT, lambda v: (v,), key=lambda v: v // 10)
    try:
        pending = [writer.submit(v) for v in (1, 2, 13, 3, 11)]  # keys 0, 0, 1, 0, 1
        await asyncio.gather(*pending)  # every caller is answered
        assert committed(db) == [3, 11]
        await writer.submit(4)  # a later batch is written on its own
        assert committed(db) == [3, 4, 11]
    finally:
        writer.close()


async def test_a_newer_write_replaces_a_waiting_one_across_passes(db: Path) -> None:
    """Under load a commit is always about to run when a task starts; its first write
    must still wait long enough for the task's next write to replace it."""
    writer = CountingWriter(db, key=lambda v: v // 10)
    try:
        earlier = writer.submit(100)  # another task's write: a commit is now on its way
        await asyncio.sleep(0)
        first = writer.submit(1)  # key 0
        await asyncio.sleep(0)
        second = writer.submit(2)  # key 0 again, one pass later
        await asyncio.gather(earlier, first, second)
        assert committed(db) == [2, 100]
        assert [v for batch in writer.transactions for v in batch] == [100, 2]
    finally:
        writer.close()


async def test_a_deferred_write_replaced_in_time_is_written_once_as_the_newer(
        db: Path) -> None:
    writer = CountingWriter(db, key=lambda v: v // 10)
    try:
        first = writer.submit(1, defer=5.0)
        for _ in range(5):
            await asyncio.sleep(0)  # passes go by: the deferred write waits
        assert writer.transactions == []
        second = writer.submit(2)
        await asyncio.wait_for(asyncio.gather(first, second), 1)  # at once, not in 5 s
        assert writer.transactions == [[2]]
        assert committed(db) == [2]
    finally:
        writer.close()


async def test_a_deferred_write_not_replaced_commits_when_its_time_is_up(db: Path) -> None:
    writer = CountingWriter(db, key=lambda v: v // 10)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        first = writer.submit(1, defer=0.1)
        later = writer.submit(13, defer=0.1)  # another key, deferred as long
        other = writer.submit(25)  # not deferred: commits on its own, at once
        await other
        assert writer.transactions == [[25]]
        await asyncio.wait_for(asyncio.gather(first, later), 5)
        assert loop.time() - started >= 0.1
        assert writer.transactions == [[25], [1, 13]]
        assert committed(db) == [1, 13, 25]
    finally:
        writer.close()


async def test_a_write_already_queued_is_never_deferred_behind_a_newer_one(
        db: Path) -> None:
    writer = CountingWriter(db, key=lambda v: v // 10)
    try:
        queued = writer.submit(1)
        deferred = writer.submit(2, defer=5.0)  # same key: it replaces the queued write
        await asyncio.wait_for(asyncio.gather(queued, deferred), 1)
        assert committed(db) == [2]
    finally:
        writer.close()


async def test_the_newer_write_of_a_key_is_answered_first(db: Path) -> None:
    """Its caller (a task's run, storing the outcome) settles the task before the caller
    of the older write (the one waiting to answer) resumes: one pass of the loop less."""
    writer = BatchWriter(db, INSERT, lambda v: (v,), key=lambda v: v // 10)
    try:
        order: list[int] = []

        async def put(v: int, defer: float = 0.0) -> None:
            await writer.submit(v, defer)
            order.append(v)

        first = asyncio.ensure_future(put(1, defer=5.0))
        await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(first, put(2)), 1)
        assert order == [2, 1]
    finally:
        writer.close()


async def test_close_commits_deferred_writes_too(db: Path) -> None:
    writer = BatchWriter(db, INSERT, lambda v: (v,))
    pending = [writer.submit(1, defer=60.0), writer.submit(2)]
    writer.close()
    await asyncio.gather(*pending)
    assert committed(db) == [1, 2]


async def test_a_failed_commit_fails_every_caller_in_it(db: Path) -> None:
    writer = BatchWriter(db, INSERT, lambda v: (v,))
    try:
        await writer.submit(1)
        batch = [writer.submit(v) for v in (2, -1, 3)]  # -1 breaks the CHECK
        results = await asyncio.gather(*batch, return_exceptions=True)
        assert all(isinstance(r, sqlite3.IntegrityError) for r in results)
        assert committed(db) == [1]
        await writer.submit(4)
        assert committed(db) == [1, 4]
    finally:
        writer.close()


async def test_a_caller_that_gives_up_still_has_its_write(db: Path) -> None:
    writer = BatchWriter(db, INSERT, lambda v: (v,))
    try:
        abandoned = asyncio.ensure_future(writer.submit(1))
        await asyncio.sleep(0)
        abandoned.cancel()
        await asyncio.wait_for(writer.submit(2), 10)
        assert committed(db) == [1, 2]
    finally:
        writer.close()


async def test_close_commits_what_was_queued(db: Path) -> None:
    writer = BatchWriter(db, INSERT, lambda v: (v,))
    pending = [writer.submit(v) for v in range(5)]
    writer.close()
    await asyncio.gather(*pending)
    assert committed(db) == list(range(5))


async def test_checkpoints_keep_the_wal_from_growing(
        db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Commits never checkpoint (the loop must not wait for an fsync): without the
    # checkpointer thread the WAL would grow with every write.
    monkeypatch.setattr(batch_writer, "CHECKPOINT_SECONDS", 0.02)
    writer = BatchWriter(db, INSERT, lambda v: (v,))
    wal = db.with_name(db.name + "-wal")

    async def write_rounds(first: int) -> None:
        for chunk in range(first, first + 20):
            await asyncio.gather(*(writer.submit(chunk * 100 + v) for v in range(100)))
            await asyncio.sleep(0.03)

    try:
        await write_rounds(0)
        peak = wal.stat().st_size
        await write_rounds(20)
        assert wal.stat().st_size <= peak * 1.5
        assert committed(db) == list(range(4000))
    finally:
        writer.close()


async def test_the_wal_starts_over_under_steady_writes(
        db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes that never pause, so every checkpoint runs while commits go on: the WAL must
    still start over, not grow with everything ever written."""
    monkeypatch.setattr(batch_writer, "CHECKPOINT_SECONDS", 0.02)
    monkeypatch.setattr(batch_writer, "RESTART_FRAMES", 64)
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE big (v TEXT NOT NULL)")
    conn.close()
    writer = BatchWriter(db, "INSERT INTO big(v) VALUES (?)", lambda v: (v,))
    wal = db.with_name(db.name + "-wal")
    row = "x" * 3000  # a page each
    peak = 0
    try:
        loop = asyncio.get_running_loop()
        until = loop.time() + 2.5
        while loop.time() < until:  # one write at a time, back to back, never idle
            await writer.submit(row)
            peak = max(peak, wal.stat().st_size)
        written = sqlite3.connect(db).execute("SELECT COUNT(*) FROM big").fetchone()[0]
        assert written > 500
        # Without starting over, the WAL holds every page ever written (several per row).
        assert peak < written * len(row) / 2
    finally:
        writer.close()


async def test_close_does_not_wait_for_a_checkpointer_asking_the_loop_to_hold(
        db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """close() joins the checkpointer on the loop's thread, so the checkpointer must not
    wait for the loop to answer its request to hold commits."""
    monkeypatch.setattr(batch_writer, "CHECKPOINT_SECONDS", 0.005)
    monkeypatch.setattr(batch_writer, "RESTART_FRAMES", 0)  # asks at every checkpoint
    for round_ in range(5):
        writer = BatchWriter(db, INSERT, lambda v: (v,))
        for v in range(20):
            await writer.submit(round_ * 100 + v)
        time.sleep(0.02)  # the loop is busy: the checkpointer is waiting for it to hold
        started = time.monotonic()
        writer.close()
        assert time.monotonic() - started < 2
    assert len(committed(db)) == 100


class ScriptedCheckpoints:
    """A connection whose PASSIVE checkpoints report frames copied so far, as scripted."""

    def __init__(self, copied: list[int]) -> None:
        self.copied = copied
        self.calls = 0

    def execute(self, sql: str) -> ScriptedCheckpoints:
        assert sql == "PRAGMA wal_checkpoint(PASSIVE)"
        self.calls += 1
        return self

    def fetchone(self) -> tuple[int, int, int]:
        return 0, 10_000, self.copied[self.calls - 1]


@pytest.mark.parametrize(("script", "rounds"), [
    ([4_200, 4_230], 2),  # 200 new frames, then 30: close enough to hold the commits
    ([4_010], 1),  # few frames were written during the first checkpoint
    ([150], 1),  # the WAL started over meanwhile
    ([5_000, 6_000, 7_000, 8_000], batch_writer.CATCH_UP_ROUNDS),  # never catches up
])
def test_unheld_checkpoints_catch_up_before_the_commits_are_held(
        script: list[int], rounds: int) -> None:
    conn = ScriptedCheckpoints(script)
    BatchWriter._catch_up(conn, 4_000)  # type: ignore[arg-type]
    assert conn.calls == rounds
