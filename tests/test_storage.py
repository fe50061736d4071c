"""The one SQLite layer (``butler.storage``): every job on the database's worker, writes
queued meanwhile committed together with each caller answered after the commit, one
failing write failing alone, blocking calls refused on the loop, files 0600 in a 0700
folder, and no storage thread left once a daemon or a registry has stopped."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from butler.registry.clock import SystemClock
from butler.registry.config import RegistryServiceConfig
from butler.registry.service import start_registry
from butler.registry.store_url import open_store
from butler.storage import CannotOpen, Database, DatabaseClosed
from tests.support import ECHO, Swarm, post_task, wait_task


def _schema(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS t (v INTEGER NOT NULL CHECK (v >= 0))")


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "t.db", name="t", setup=_schema)
    try:
        yield database
    finally:
        await database.close()


def _insert(conn: sqlite3.Connection, v: int) -> int:
    conn.execute("INSERT INTO t(v) VALUES (?)", (v,))
    return v


def committed(path: Path) -> list[int]:
    conn = sqlite3.connect(path)  # another connection: only what is committed
    try:
        return [v for (v,) in conn.execute("SELECT v FROM t ORDER BY v")]
    finally:
        conn.close()


async def test_every_statement_runs_on_the_worker(db: Database) -> None:
    threads: set[int] = set()
    await db.run(lambda conn: conn.set_trace_callback(
        lambda _sql: threads.add(threading.get_ident())))
    await db.transaction(_insert, 1)
    await db.execute("INSERT INTO t(v) VALUES (?)", (2,))
    assert await db.fetchone("SELECT COUNT(*) FROM t") == (2,)
    assert await db.fetchall("SELECT v FROM t ORDER BY v") == [(1,), (2,)]
    assert len(threads) == 1 and threading.get_ident() not in threads


async def test_writes_queued_during_a_commit_share_the_next_transaction(
        db: Database) -> None:
    begins: list[str] = []
    await db.run(lambda conn: conn.set_trace_callback(
        lambda sql: begins.append(sql) if sql.startswith("BEGIN") else None))
    started, gate = threading.Event(), threading.Event()

    def busy(conn: sqlite3.Connection) -> None:
        started.set()
        gate.wait(10)

    holding = db.transaction(busy)
    blocked = asyncio.ensure_future(holding)
    await asyncio.to_thread(started.wait, 10)  # the worker is inside that transaction

    async def put(v: int) -> list[int]:
        await db.transaction(_insert, v)
        return committed(db.path)

    writes = asyncio.gather(*(put(v) for v in range(20)))
    await asyncio.sleep(0)  # every write is queued while the worker is busy
    gate.set()
    await blocked
    seen = await writes
    for v, rows in enumerate(seen):
        assert v in rows  # each caller resumed after its own commit
    assert len(begins) == 2  # the busy transaction, then all 20 writes in one


async def test_one_failing_write_fails_alone(db: Database) -> None:
    started, gate = threading.Event(), threading.Event()

    def busy(conn: sqlite3.Connection) -> None:
        started.set()
        gate.wait(10)

    blocked = asyncio.ensure_future(db.run(busy))
    await asyncio.to_thread(started.wait, 10)
    writes = asyncio.gather(*(db.transaction(_insert, v) for v in (1, -1, 2)),
                            return_exceptions=True)
    await asyncio.sleep(0)
    gate.set()
    await blocked
    one, bad, two = await writes
    assert (one, two) == (1, 2)
    assert isinstance(bad, sqlite3.IntegrityError)  # -1 breaks the CHECK
    assert committed(db.path) == [1, 2]


async def test_blocking_calls_are_refused_on_the_loop(db: Database, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="event loop"):
        db.call(_insert, 1)
    with pytest.raises(RuntimeError, match="event loop"):
        Database.open_blocking(tmp_path / "u.db", name="u")
    assert await asyncio.to_thread(db.call, _insert, 3, write=True) == 3  # off the loop


async def test_close_ends_the_worker_and_later_jobs_fail(tmp_path: Path) -> None:
    database = await Database.open(tmp_path / "t.db", name="t", setup=_schema)
    await database.transaction(_insert, 1)
    assert any(t.name == "storage-t" for t in threading.enumerate())
    await database.close()
    await database.close()  # idempotent
    assert not any(t.name == "storage-t" for t in threading.enumerate())
    with pytest.raises(DatabaseClosed):
        await database.fetchall("SELECT v FROM t")


async def test_a_file_that_cannot_be_opened_is_named(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(CannotOpen, match=r"dir\.db") as caught:
        await Database.open(tmp_path / "dir.db", name="d")
    assert isinstance(caught.value, OSError)  # reported at start-up like a bind error
    assert not any(t.name == "storage-d" for t in threading.enumerate())


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_daemon_keeps_its_data_private(swarm: Swarm, tmp_path: Path) -> None:
    """Files created by Butler and files left readable by an older version alike."""
    data_dir = tmp_path / "home"
    data_dir.mkdir(mode=0o755)
    data_dir.chmod(0o755)
    old = sqlite3.connect(data_dir / "memory.db")  # as an older Butler left it
    old.execute("CREATE TABLE leftover (v)")
    old.close()
    (data_dir / "memory.db").chmod(0o644)
    previous = os.umask(0o022)  # the usual umask, whatever the runner's
    try:
        home = await swarm.start("home", skills=[
            ECHO, {"id": "memory.write", "builtin": "memory.write", "expose": True}])
    finally:
        os.umask(previous)
    for body in ({"task": "hi", "skill": "echo"},
                 {"task": "x", "skill": "memory.write", "input": {"text": "a note"}}):
        status, task = await post_task(home, body)
        assert status in (200, 202), task
        assert (await wait_task(home, task["id"]))["state"] == "completed"

    def modes() -> dict[str, int]:
        return {p.name: _mode(p) for p in data_dir.iterdir()}

    def private(found: dict[str, int]) -> dict[str, int]:
        """Folders (``runs``, command skills' records) 0700, files 0600."""
        return {name: 0o700 if (data_dir / name).is_dir() else 0o600 for name in found}

    running = modes()
    assert {"tasks.db", "audit.db", "memory.db", "workspace.db", "push.db"} <= set(running)
    assert any(name.endswith("-wal") for name in running)
    assert running == private(running)
    assert _mode(data_dir) == 0o700
    await swarm.stop(home)
    assert modes() == private(modes())


def _storage_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("storage-")}


async def test_no_storage_thread_outlives_a_daemon(swarm: Swarm) -> None:
    before = _storage_threads()
    home = await swarm.start("home")
    status, task = await post_task(home, {"task": "hi", "skill": "echo"})
    assert status in (200, 202)
    await wait_task(home, task["id"])
    assert len(_storage_threads() - before) == 6  # five databases, the task checkpointer
    await swarm.stop(home)
    assert _storage_threads() == before


async def test_no_storage_thread_outlives_a_registry(tmp_path: Path) -> None:
    before = _storage_threads()
    store = await open_store(f"sqlite:{tmp_path / 'registry.db'}")
    running = await start_registry(RegistryServiceConfig(port=0), store, SystemClock())
    assert len(_storage_threads() - before) == 1
    await running.close()
    await store.close()
    assert _storage_threads() == before
