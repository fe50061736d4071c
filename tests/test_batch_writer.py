"""Group commits (``butler.storage.BatchWriter``): each caller is answered only after
its own commit, writes made together share one transaction (one row per key), a deferred
write waits for a newer one of its key or for its time to be up, a failed commit fails
everyone in it, a caller that stops waiting does not lose its write, and checkpoints keep
the WAL bounded."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import pytest

from butler.storage import BatchWriter, CheckpointPolicy, Database, catch_up
from butler.storage._batch_writer import Item

INSERT = "INSERT INTO t(v) VALUES (?)"
FAST = CheckpointPolicy(interval=0.02)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "t.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (v INTEGER NOT NULL CHECK (v >= 0))")
    conn.close()
    return path


class ValueWriter(BatchWriter):
    """Writes one value a row, under the key ``key_of(value)``."""

    key_of: Callable[[Any], Any] = id

    def value(self, v: Any, defer: float = 0.0) -> asyncio.Future[None]:
        return self.submit(self.key_of(v), (v,), defer)


async def open_writer(path: Path, on_loop: bool, statement: str = INSERT, key: Any = id,
                      policy: CheckpointPolicy = FAST,
                      writer: type[ValueWriter] = ValueWriter) -> ValueWriter:
    database = await Database.open(path, name="t", pragmas=policy.pragmas())
    made = writer(database, statement, checkpoints=policy, commit_on_loop=on_loop)
    made.key_of = key
    return made


@pytest.fixture(params=[False, True], ids=["on-worker", "on-loop"])
def on_loop(request: pytest.FixtureRequest) -> bool:
    """Every behaviour holds in both commit modes."""
    flag: bool = request.param
    return flag


async def close(writer: BatchWriter) -> None:
    await writer.close()
    await writer._db.close()


def committed(path: Path) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [v for (v,) in conn.execute("SELECT v FROM t ORDER BY v")]
    finally:
        conn.close()


async def test_each_caller_is_answered_after_its_commit(db: Path, on_loop: bool) -> None:
    writer = await open_writer(db, on_loop)
    try:
        async def put(v: int) -> list[int]:
            await writer.value(v)
            return committed(db)  # another connection: only what is committed

        seen = await asyncio.gather(*(put(v) for v in range(50)))
        for v, rows in enumerate(seen):
            assert v in rows
        assert committed(db) == list(range(50))
    finally:
        await close(writer)


class CountingWriter(ValueWriter):
    transactions: list[list[int]]

    def _commit(self, conn: sqlite3.Connection,
                items: dict[Hashable, Item]) -> dict[Hashable, Exception]:
        self.transactions = getattr(self, "transactions", [])
        self.transactions.append([row[0] for row in items.values() if not callable(row)])
        return super()._commit(conn, items)


async def counting_writer(path: Path, on_loop: bool, key: Any = id) -> CountingWriter:
    writer = await open_writer(path, on_loop, key=key, writer=CountingWriter)
    assert isinstance(writer, CountingWriter)
    writer.transactions = []
    return writer


async def test_writes_made_together_share_one_transaction(db: Path, on_loop: bool) -> None:
    writer = await counting_writer(db, on_loop)
    try:
        pending = [writer.value(v) for v in range(10)]
        assert committed(db) == []  # nothing is committed before the loop gets to it
        await asyncio.gather(*pending)
        await writer.value(10)
        assert writer.transactions == [list(range(10)), [10]]
    finally:
        await close(writer)


async def test_writes_with_one_key_in_one_batch_are_written_once_as_the_last(
        db: Path, on_loop: bool) -> None:
    writer = await open_writer(db, on_loop, key=lambda v: v // 10)
    try:
        pending = [writer.value(v) for v in (1, 2, 13, 3, 11)]  # keys 0, 0, 1, 0, 1
        await asyncio.gather(*pending)  # every caller is answered
        assert committed(db) == [3, 11]
        await writer.value(4)  # a later batch is written on its own
        assert committed(db) == [3, 4, 11]
    finally:
        await close(writer)


async def test_a_newer_write_replaces_a_waiting_one_across_passes(db: Path, on_loop: bool) -> None:
    """Under load a commit is always about to run when a task starts; its first write
    must still wait long enough for the task's next write to replace it."""
    writer = await counting_writer(db, on_loop, key=lambda v: v // 10)
    try:
        earlier = writer.value(100)  # another task's write: a commit is now on its way
        await asyncio.sleep(0)
        first = writer.value(1)  # key 0
        await asyncio.sleep(0)
        second = writer.value(2)  # key 0 again, one pass later
        await asyncio.gather(earlier, first, second)
        assert committed(db) == [2, 100]
        assert [v for batch in writer.transactions for v in batch] == [100, 2]
    finally:
        await close(writer)


async def test_a_deferred_write_replaced_in_time_is_written_once_as_the_newer(
        db: Path, on_loop: bool) -> None:
    writer = await counting_writer(db, on_loop, key=lambda v: v // 10)
    try:
        first = writer.value(1, defer=5.0)
        for _ in range(5):
            await asyncio.sleep(0)  # passes go by: the deferred write waits
        assert writer.transactions == []
        second = writer.value(2)
        await asyncio.wait_for(asyncio.gather(first, second), 1)  # at once, not in 5 s
        assert writer.transactions == [[2]]
        assert committed(db) == [2]
    finally:
        await close(writer)


async def test_a_deferred_write_not_replaced_commits_when_its_time_is_up(
        db: Path, on_loop: bool) -> None:
    writer = await counting_writer(db, on_loop, key=lambda v: v // 10)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        first = writer.value(1, defer=0.1)
        later = writer.value(13, defer=0.1)  # another key, deferred as long
        other = writer.value(25)  # not deferred: commits on its own, at once
        await other
        assert writer.transactions == [[25]]
        await asyncio.wait_for(asyncio.gather(first, later), 5)
        assert loop.time() - started >= 0.1
        assert writer.transactions == [[25], [1, 13]]
        assert committed(db) == [1, 13, 25]
    finally:
        await close(writer)


async def test_a_write_already_queued_is_never_deferred_behind_a_newer_one(
        db: Path, on_loop: bool) -> None:
    writer = await counting_writer(db, on_loop, key=lambda v: v // 10)
    try:
        queued = writer.value(1)
        deferred = writer.value(2, defer=5.0)  # same key: it replaces the queued write
        await asyncio.wait_for(asyncio.gather(queued, deferred), 1)
        assert committed(db) == [2]
    finally:
        await close(writer)


async def test_the_newer_write_of_a_key_is_answered_first(db: Path, on_loop: bool) -> None:
    """Its caller (a task's run, storing the outcome) settles the task before the caller
    of the older write (the one waiting to answer) resumes: one pass of the loop less."""
    writer = await open_writer(db, on_loop, key=lambda v: v // 10)
    try:
        order: list[int] = []

        async def put(v: int, defer: float = 0.0) -> None:
            await writer.value(v, defer)
            order.append(v)

        first = asyncio.ensure_future(put(1, defer=5.0))
        await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(first, put(2)), 1)
        assert order == [2, 1]
    finally:
        await close(writer)


async def test_close_commits_deferred_writes_too(db: Path, on_loop: bool) -> None:
    writer = await open_writer(db, on_loop)
    pending = [writer.value(1, defer=60.0), writer.value(2)]
    await close(writer)
    await asyncio.gather(*pending)
    assert committed(db) == [1, 2]


async def test_a_failed_commit_fails_every_caller_in_it(db: Path, on_loop: bool) -> None:
    writer = await open_writer(db, on_loop)
    try:
        await writer.value(1)
        batch = [writer.value(v) for v in (2, -1, 3)]  # -1 breaks the CHECK
        results = await asyncio.gather(*batch, return_exceptions=True)
        assert all(isinstance(r, sqlite3.IntegrityError) for r in results)
        assert committed(db) == [1]
        await writer.value(4)
        assert committed(db) == [1, 4]
    finally:
        await close(writer)


async def test_a_caller_that_gives_up_still_has_its_write(db: Path, on_loop: bool) -> None:
    writer = await open_writer(db, on_loop)
    try:
        abandoned = asyncio.ensure_future(writer.value(1))
        await asyncio.sleep(0)
        abandoned.cancel()
        await asyncio.wait_for(writer.value(2), 10)
        assert committed(db) == [1, 2]
    finally:
        await close(writer)


async def test_close_commits_what_was_queued(db: Path, on_loop: bool) -> None:
    writer = await open_writer(db, on_loop)
    pending = [writer.value(v) for v in range(5)]
    await close(writer)
    await asyncio.gather(*pending)
    assert committed(db) == list(range(5))


async def test_checkpoints_keep_the_wal_from_growing(
        db: Path, on_loop: bool) -> None:
    # Commits never checkpoint (they must not wait for an fsync): without the
    # checkpointer thread the WAL would grow with every write. A WAL that starts over
    # gets new salts in its header (sqlite.org/fileformat.html#walformat), so the start-overs
    # are seen as they happen, however slowly a busy machine runs the checkpointer.
    writer = await open_writer(db, on_loop)
    wal = db.with_name(db.name + "-wal")
    salts: set[bytes] = set()
    rounds = 0
    try:
        while len(salts) < 4 and rounds < 2000:
            await asyncio.gather(*(writer.value(rounds * 100 + v) for v in range(100)))
            rounds += 1
            with wal.open("rb") as header:
                salts.add(header.read(24)[16:24])
            await asyncio.sleep(0.01)  # writes paced as traffic is, not a wait for anything
        assert len(salts) >= 4, f"the WAL never started over in {rounds} rounds of writes"
        assert committed(db) == list(range(rounds * 100))
    finally:
        await close(writer)


async def test_the_wal_starts_over_under_steady_writes(
        db: Path, on_loop: bool) -> None:
    """Writes that never pause, so every checkpoint runs while commits go on: the WAL must
    still start over, not grow with everything ever written."""
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE big (v TEXT NOT NULL)")
    conn.close()
    writer = await open_writer(db, on_loop, "INSERT INTO big(v) VALUES (?)",
                               policy=CheckpointPolicy(interval=0.02, restart_frames=64))
    wal = db.with_name(db.name + "-wal")
    row = "x" * 3000  # a page each
    restarts, seen = 0, None
    try:
        # One write at a time, back to back, never idle, until the WAL has started over
        # three times: each start over bumps the checkpoint sequence in its header (bytes
        # 12-16). A busy machine gives the checkpointer fewer turns, so this runs longer
        # there, but the WAL must start over all the same.
        sent = 0
        async with asyncio.timeout(120):
            while restarts < 3 or sent < 500:
                await writer.value(row)
                sent += 1
                with wal.open("rb") as header:
                    sequence = header.read(16)[12:16]
                if seen is not None and sequence != seen:
                    restarts += 1
                seen = sequence
        written = sqlite3.connect(db).execute("SELECT COUNT(*) FROM big").fetchone()[0]
        assert written == sent
    finally:
        await close(writer)


async def test_close_does_not_wait_for_a_checkpointer_holding_the_commits(
        db: Path, on_loop: bool) -> None:
    """The checkpointer waits for the commits to be held (by the worker, or by the loop);
    closing the writer and the database meanwhile must not leave either waiting for the
    other."""
    policy = CheckpointPolicy(interval=0.005, restart_frames=0)  # holds at every checkpoint
    for round_ in range(5):
        writer = await open_writer(db, on_loop, policy=policy)
        for v in range(20):
            await writer.value(round_ * 100 + v)
        time.sleep(0.02)  # the loop is busy: checkpoints run meanwhile
        await asyncio.wait_for(close(writer), 60)  # a hang bound, not a time limit
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
    ([5_000, 6_000, 7_000, 8_000], FAST.catch_up_rounds),  # never catches up
])
def test_unheld_checkpoints_catch_up_before_the_commits_are_held(
        script: list[int], rounds: int) -> None:
    conn = ScriptedCheckpoints(script)
    catch_up(conn, 4_000, FAST)  # type: ignore[arg-type]
    assert conn.calls == rounds


async def test_a_row_that_cannot_be_made_at_its_commit_fails_its_own_write_alone(
        db: Path, on_loop: bool) -> None:
    """A deferred write's row is made when it commits; one that cannot be made then is
    left out of that commit, and only its callers hear why."""
    writer = await open_writer(db, on_loop)

    def unmade() -> tuple[int]:
        raise ValueError("no form for it")

    try:
        bad = writer.submit("bad", unmade, defer=0.01)
        good = [writer.value(v) for v in (1, 2)]
        later = writer.submit("later", lambda: (3,), defer=0.01)
        with pytest.raises(ValueError, match="no form for it"):
            await bad
        await asyncio.gather(*good, later)
        assert committed(db) == [1, 2, 3]
    finally:
        await close(writer)
