"""Group commits: each caller is answered only after its own commit, a failed commit
fails everyone in it, and a caller that stops waiting does not stop the writer."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

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


class Gate:
    """An encoder that holds the writer inside its first batch until opened, so the
    test knows exactly which items share the next batch."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()

    def __call__(self, value: int) -> tuple[int]:
        if not self.entered.is_set():
            self.entered.set()
            self.open.wait(10)
        return (value,)


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.open.set()


async def test_each_caller_is_answered_after_its_commit(db: Path) -> None:
    writer = BatchWriter(db, INSERT, lambda v: (v,))
    try:
        async def put(v: int) -> list[int]:
            await writer.submit(v)
            return committed(db)

        seen = await asyncio.gather(*(put(v) for v in range(50)))
        for v, rows in enumerate(seen):
            assert v in rows
        assert committed(db) == list(range(50))
    finally:
        await asyncio.to_thread(writer.close)


async def test_a_failed_commit_fails_every_caller_in_it(db: Path, gate: Gate) -> None:
    writer = BatchWriter(db, INSERT, gate)
    try:
        first = writer.submit(1)
        assert await asyncio.to_thread(gate.entered.wait, 10)
        batch = [writer.submit(v) for v in (2, -1, 3)]  # -1 breaks the CHECK
        gate.open.set()
        await first
        results = await asyncio.gather(*batch, return_exceptions=True)
        assert all(isinstance(r, sqlite3.IntegrityError) for r in results)
        assert committed(db) == [1]
        await writer.submit(4)
        assert committed(db) == [1, 4]
    finally:
        await asyncio.to_thread(writer.close)


async def test_a_caller_that_gives_up_does_not_stop_the_writer(db: Path, gate: Gate) -> None:
    # Regression: settling a cancelled waiter raised in the writer thread, which died and
    # left every later write waiting forever.
    writer = BatchWriter(db, INSERT, gate)
    try:
        abandoned = asyncio.ensure_future(writer.submit(1))
        assert await asyncio.to_thread(gate.entered.wait, 10)
        abandoned.cancel()
        gate.open.set()
        await asyncio.wait_for(writer.submit(2), 10)
        assert committed(db) == [1, 2]  # the abandoned write still happened
    finally:
        await asyncio.to_thread(writer.close)


async def test_close_commits_what_was_queued(db: Path, gate: Gate) -> None:
    writer = BatchWriter(db, INSERT, gate)
    pending = [writer.submit(v) for v in range(5)]
    assert await asyncio.to_thread(gate.entered.wait, 10)
    gate.open.set()
    await asyncio.to_thread(writer.close)
    await asyncio.gather(*pending)
    assert committed(db) == list(range(5))
