"""When the engine commits a task: a blocking task that finishes within the defer time is
written once, finished, and a longer one is on disk while it runs; a task is acknowledged
only once committed; a task whose first commit fails is not left running."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from butler.config.model import SkillConfig
from butler.engine.engine import FIRST_WRITE_DEFER_SECONDS, TaskEngine
from butler.engine.run import RunDeps
from butler.engine.store import SqliteTaskStore
from butler.skills.builtin import echo
from butler.skills.catalog import Skill, SkillCatalog
from butler.swarm.decision import SwarmPolicy
from internal.protocol.a2a.model import Envelope, Identity, TaskRequest, TaskState
from tests.support import wait_until

CALLER = Identity("operator")
ECHO = SkillConfig(id="echo", name="echo", capabilities=("echo",), expose=True)


class Audit:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, kind: str, **fields: Any) -> None:
        self.records.append((kind, fields))


def sleeper(seconds: float, started: asyncio.Event | None = None) -> Skill:
    """The skill ``slow``: it sleeps that long, then answers."""
    async def slow(ctx: Any) -> str:
        if started is not None:
            started.set()
        await asyncio.sleep(seconds)
        return "done"

    return Skill(SkillConfig(id="slow", name="slow", capabilities=("slow",), expose=True), slow)


def disk_full(path: Path) -> None:
    """Every new task row is refused from now on, as a full disk refuses it."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TRIGGER full BEFORE INSERT ON tasks "
                 "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
    conn.commit()
    conn.close()


def make_engine(store: Any, audit: Audit, skill: Skill | None = None) -> TaskEngine:
    return TaskEngine(
        RunDeps(agent_id="home", audit=audit), store=store,
        catalog=SkillCatalog([skill or Skill(ECHO, echo)], None),
        policy=SwarmPolicy("home", 4, Decimal("1")), delegator=None,
        retention_hours=1, default_timeout=30, card=lambda _: {})


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteTaskStore]:
    path = tmp_path / "tasks.db"
    sqlite = await SqliteTaskStore.open(path)
    # Every row written, insert or update, as the database saw it.
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE writes (id, state INTEGER);
        CREATE TRIGGER tasks_insert AFTER INSERT ON tasks
            BEGIN INSERT INTO writes VALUES (new.id, new.state); END;
        CREATE TRIGGER tasks_update AFTER UPDATE ON tasks
            BEGIN INSERT INTO writes VALUES (new.id, new.state); END;
    """)
    conn.close()
    yield sqlite
    await sqlite.close()


def writes(tmp_path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(tmp_path / "tasks.db")
    try:
        return list(conn.execute("SELECT id, state FROM writes ORDER BY rowid"))
    finally:
        conn.close()


async def test_a_blocking_echo_is_written_once_finished(
        store: SqliteTaskStore, tmp_path: Path) -> None:
    audit = Audit()
    engine = make_engine(store, audit)
    await engine.start()
    try:
        tasks = await asyncio.gather(*(
            engine.submit(CALLER, TaskRequest(text=f"hi {i}", skill="echo"), Envelope())
            for i in range(20)))
        assert all(t.state is TaskState.COMPLETED for t in tasks)
        assert sorted(writes(tmp_path)) == sorted((t.id, "completed") for t in tasks)
        for task in tasks:  # what the caller was told is what is stored
            assert await store.get(task.id) == task
        kinds = [(kind, fields["task_id"]) for kind, fields in audit.records]
        for task in tasks:  # accepted, then finished, in that order
            assert kinds.index(("inbound", task.id)) < kinds.index(("task_finished", task.id))
    finally:
        await engine.stop(1)


async def test_a_blocking_task_is_written_once_if_it_finishes_within_the_defer_time(
        store: SqliteTaskStore, tmp_path: Path) -> None:
    """A quick delegation takes many passes of the loop, but not many milliseconds."""
    engine = make_engine(store, Audit(), sleeper(FIRST_WRITE_DEFER_SECONDS / 5))
    await engine.start()
    try:
        task = await engine.submit(CALLER, TaskRequest(text="hi", skill="slow"), Envelope())
        assert task.state is TaskState.COMPLETED
        assert writes(tmp_path) == [(task.id, "completed")]
    finally:
        await engine.stop(1)


async def test_a_longer_blocking_task_is_on_disk_as_working_while_it_runs(
        store: SqliteTaskStore, tmp_path: Path) -> None:
    release = asyncio.Event()

    async def held(ctx: Any) -> str:
        await release.wait()
        return "done"

    engine = make_engine(store, Audit(), Skill(SkillConfig(
        id="slow", name="slow", capabilities=("slow",), expose=True), held))
    await engine.start()
    try:
        call = asyncio.ensure_future(
            engine.submit(CALLER, TaskRequest(text="hi", skill="slow"), Envelope()))
        # Its deferred first write commits once its time is up, the task still running.
        [(task_id, state)] = await wait_until(lambda: writes(tmp_path), what="first write")
        assert state == "working" and not call.done()  # a crash now would leave this record
        release.set()
        task = await call
        assert writes(tmp_path) == [(task_id, "working"), (task.id, "completed")]
    finally:
        await engine.stop(1)


async def test_a_blocking_task_with_its_own_id_is_committed_before_it_runs(
        store: SqliteTaskStore, tmp_path: Path) -> None:
    engine = make_engine(store, Audit())
    await engine.start()
    try:
        task = await engine.submit(CALLER, TaskRequest(id="mine-1", text="hi", skill="echo"),
                                   Envelope())
        assert task.state is TaskState.COMPLETED
        # At most once across a crash: its running state was on disk before it ran.
        assert writes(tmp_path) == [("mine-1", "working"), ("mine-1", "completed")]
    finally:
        await engine.stop(1)


async def test_a_task_that_returns_at_once_is_committed_working(
        store: SqliteTaskStore, tmp_path: Path) -> None:
    engine = make_engine(store, Audit())
    await engine.start()
    try:
        task = await engine.submit(CALLER, TaskRequest(text="hi", skill="echo", blocking=False),
                                   Envelope())
        assert task.state is TaskState.WORKING
        assert writes(tmp_path)[0] == (task.id, "working")  # acknowledged once committed
        done = await engine.wait(task.id)
        assert done.state is TaskState.COMPLETED
        assert writes(tmp_path) == [(task.id, "working"), (task.id, "completed")]
    finally:
        await engine.stop(1)


async def test_a_task_whose_first_commit_fails_is_not_left_running(
        store: SqliteTaskStore, tmp_path: Path) -> None:
    started, stopped = asyncio.Event(), asyncio.Event()

    async def nap(ctx: Any) -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        finally:
            stopped.set()
        return "rested"

    disk_full(tmp_path / "tasks.db")
    audit = Audit()
    nap_skill = SkillConfig(id="nap", name="nap", capabilities=("nap",), expose=True)
    engine = make_engine(store, audit, Skill(nap_skill, nap))
    await engine.start()
    try:
        with pytest.raises(sqlite3.Error, match="disk is full"):
            await engine.submit(CALLER, TaskRequest(text="hi", skill="nap"), Envelope())
        assert started.is_set()  # a blocking task starts before its first commit...
        await asyncio.wait_for(stopped.wait(), 5)  # ...and is stopped when it fails
        kinds = [kind for kind, _ in audit.records]
        assert kinds == ["inbound", "task_finished"]
        finished = audit.records[1][1]
        assert (finished["decision"], finished["code"]) == ("failed", "store_unavailable")
        assert engine.live(finished["task_id"]) is None
        assert await store.get(finished["task_id"]) is None
    finally:
        await engine.stop(1)


async def test_an_async_task_whose_first_commit_fails_never_starts_and_is_ended(
        store: SqliteTaskStore, tmp_path: Path) -> None:
    started = asyncio.Event()

    async def never(ctx: Any) -> str:
        started.set()
        return "ran"

    disk_full(tmp_path / "tasks.db")
    audit = Audit()
    engine = make_engine(store, audit, Skill(SkillConfig(
        id="never", name="never", capabilities=("never",), expose=True), never))
    await engine.start()
    try:
        with pytest.raises(sqlite3.Error, match="disk is full"):
            await engine.submit(CALLER, TaskRequest(text="hi", skill="never", blocking=False),
                                Envelope())
        assert not started.is_set()  # committed first, so it never ran
        assert [kind for kind, _ in audit.records] == ["inbound", "task_finished"]
        assert audit.records[1][1]["code"] == "store_unavailable"
    finally:
        await engine.stop(1)


async def test_a_blocking_caller_gets_an_error_when_the_final_commit_fails(
        store: SqliteTaskStore, tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "tasks.db")
    conn.execute("CREATE TRIGGER full BEFORE UPDATE ON tasks WHEN new.state = 'completed' "
                 "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
    conn.commit()
    conn.close()
    # Long enough for the first write to commit.
    engine = make_engine(store, Audit(), sleeper(FIRST_WRITE_DEFER_SECONDS + 0.1))
    await engine.start()
    try:
        with pytest.raises(sqlite3.Error, match="disk is full"):
            await asyncio.wait_for(
                engine.submit(CALLER, TaskRequest(text="hi", skill="slow"), Envelope()), 5)
        assert [state for _, state in writes(tmp_path)] == ["working"]
    finally:
        await engine.stop(1)


async def test_a_blocking_caller_that_goes_away_leaves_its_task_to_finish(
        store: SqliteTaskStore, tmp_path: Path) -> None:
    audit = Audit()
    engine = make_engine(store, audit, sleeper(FIRST_WRITE_DEFER_SECONDS + 0.1))
    await engine.start()
    try:
        call = asyncio.ensure_future(
            engine.submit(CALLER, TaskRequest(text="hi", skill="slow"), Envelope()))
        await asyncio.sleep(0)  # submitted: started, its first write queued
        call.cancel()  # the caller goes away before that write committed
        with pytest.raises(asyncio.CancelledError):
            await call
        def finished() -> list[str]:
            return [f["decision"] for kind, f in audit.records if kind == "task_finished"]

        await wait_until(lambda: len(writes(tmp_path)) == 2, what="its outcome committed")
        assert [state for _, state in writes(tmp_path)] == ["working", "completed"]
        # The file shows the commit as soon as it is made; the engine records the task's
        # end once the loop hears of it, a moment later.
        await wait_until(finished, what="its end recorded")
        assert finished() == ["completed"]
        assert engine._waiters.waiting == 0  # nobody is left waiting for it
    finally:
        await engine.stop(1)
