"""The audit writer's backlog is bounded: when its disk falls behind, new tasks wait at
the engine's door (``AuditWriter.room``) instead of records piling up in memory, and none
is lost. The disk is made slow by holding ``audit.db``'s worker thread on a gate."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from butler.audit import AuditLog
from butler.audit.log import AuditWriter
from butler.config.model import SkillConfig
from butler.engine.engine import TaskEngine
from butler.engine.run import RunDeps
from butler.engine.store import SqliteTaskStore
from butler.skills.builtin import echo
from butler.skills.catalog import Skill, SkillCatalog
from butler.swarm.decision import SwarmPolicy
from internal.protocol.a2a.model import Envelope, Identity, TaskRequest, TaskState

BACKLOG = 40
INFLIGHT = 10  # requests in flight at once, as the listener's max_inflight caps them
# Requests already past the door when it closes still add their records (two per task).
BOUND = BACKLOG + 2 * INFLIGHT


class SlowDisk:
    """Holds the database's worker until opened: everything queued behind it waits."""

    def __init__(self, log: AuditLog) -> None:
        self.gate, self.entered = threading.Event(), threading.Event()
        self.held = asyncio.wrap_future(log.db.submit(self._hold))

    def _hold(self, _conn: object) -> None:
        self.entered.set()
        self.gate.wait()

    async def holding(self) -> None:
        """Once the worker is inside: a write queued in its round before that would
        have been committed first."""
        await asyncio.to_thread(self.entered.wait)

    async def open(self) -> None:
        self.gate.set()
        await self.held


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[tuple[AuditLog, AuditWriter, TaskEngine]]:
    log = await AuditLog.open(tmp_path / "audit.db")
    writer = AuditWriter(log, max_backlog=BACKLOG)
    store = await SqliteTaskStore.open(tmp_path / "tasks.db")
    engine = TaskEngine(
        RunDeps(agent_id="home", audit=lambda kind, **f: writer.submit(kind, f),
                 audit_room=writer.room),
        store=store, catalog=SkillCatalog([Skill(SkillConfig(
            id="echo", name="echo", capabilities=("echo",), expose=True), echo)], None),
        policy=SwarmPolicy("home", 4, Decimal("1")), delegator=None,
        retention_hours=1, default_timeout=30, card=lambda _: {})
    await engine.start(log)
    yield log, writer, engine
    await engine.stop(1)
    await writer.close()
    await store.close()
    await log.db.close()


def stored(log: AuditLog) -> int:
    with sqlite3.connect(log.path) as db:
        count: int = db.execute("SELECT count(*) FROM audit").fetchone()[0]
    return count


async def test_new_tasks_wait_while_the_audit_trail_is_behind_and_nothing_is_lost(
        parts: tuple[AuditLog, AuditWriter, TaskEngine]) -> None:
    log, writer, engine = parts
    disk = SlowDisk(log)
    await disk.holding()
    peak = 0
    inflight = asyncio.Semaphore(INFLIGHT)

    async def one(i: int) -> Any:
        nonlocal peak
        async with inflight:
            task = await engine.submit(Identity("operator"),
                                       TaskRequest(text=f"t{i}", skill="echo"), Envelope())
        peak = max(peak, writer.backlog)
        return task

    flood = [asyncio.create_task(one(i)) for i in range(200)]
    try:
        # Without the door all 200 would finish now, leaving 400 records queued.
        _, waiting = await asyncio.wait(flood, timeout=0.5)
        assert waiting, "the flood was held at the door"
        assert writer.backlog <= BOUND, writer.backlog
        assert stored(log) == 0  # the disk is still stuck
    finally:
        await disk.open()
    tasks = await asyncio.gather(*flood)
    assert all(t.state is TaskState.COMPLETED for t in tasks)
    assert peak <= BOUND, peak
    await writer.flush()
    assert writer.backlog == 0
    assert stored(log) == 2 * 200  # every record written, none dropped
    assert (await asyncio.to_thread(log.verify)).ok


async def test_room_is_immediate_while_the_writer_keeps_up(
        parts: tuple[AuditLog, AuditWriter, TaskEngine]) -> None:
    _, writer, _ = parts
    for _ in range(BACKLOG - 1):
        writer.submit("refusal", {"caller": "x", "decision": "refused", "chain": ()})
    await writer.room()  # returns without the writer having written anything
    await writer.flush()
    assert writer.backlog == 0
