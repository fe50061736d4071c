"""The SQLite registry's reads on the event loop: bounded, never waiting for a lock, and
moved to the worker thread when a read would scan for long."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from registry_support import make_card

from butler.registry import sqlite_store
from butler.registry.card import build_entry, validate_card
from butler.registry.model import AgentEntry, _iso
from butler.registry.sqlite_store import SqliteStore
from butler.registry.store import Query

NOW = 1_800_000_000.0


def _entry(name: str, caps: tuple[str, ...] = ("memory.search",)) -> AgentEntry:
    index = validate_card(make_card(name.title(), caps=caps), max_bytes=65536)
    return build_entry(name, "alice", index, url=f"http://{name}.lan:8081", now=NOW,
                       ttl_seconds=60)


async def _fill(store: SqliteStore, count: int) -> None:
    for i in range(count):
        await store.upsert(_entry(f"agent-{i:04d}"), now=NOW, max_names=10_000)


async def test_a_long_scan_moves_to_the_worker_with_the_same_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await SqliteStore.open(tmp_path / "r.db")
    try:
        await _fill(store, 300)
        query = Query(capability="memory.search")
        quick, quick_next = await store.query(query, now=NOW, limit=200)
        assert not store._ticks > sqlite_store.LOOP_READ_STEPS // sqlite_store._STEPS_PER_TICK
        monkeypatch.setattr(sqlite_store, "LOOP_READ_STEPS", sqlite_store._STEPS_PER_TICK)
        moved, moved_next = await store.query(query, now=NOW, limit=200)
        assert store._ticks > 1  # the loop's read was interrupted ...
        assert [e.name for e in moved] == [e.name for e in quick]  # ... and redone whole
        assert moved_next == quick_next == "agent-0199"
        assert moved == quick
        assert await store.get("agent-0150", now=NOW) == quick[150]
    finally:
        await store.close()


async def test_loop_reads_see_commits_and_never_wait_for_a_writer(tmp_path: Path) -> None:
    """Another process holding the write lock (an open transaction) neither blocks the
    loop's read nor shows it uncommitted rows; once committed, the next read sees them."""
    path = tmp_path / "r.db"
    store = await SqliteStore.open(path)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        await _fill(store, 3)
        other.execute("BEGIN IMMEDIATE")
        other.execute("DELETE FROM agent_terms WHERE name = 'agent-0001'")
        found, _ = await store.query(Query(capability="memory.search"), now=NOW, limit=10)
        assert [e.name for e in found] == ["agent-0000", "agent-0001", "agent-0002"]
        other.execute("COMMIT")
        found, _ = await store.query(Query(capability="memory.search"), now=NOW, limit=10)
        assert [e.name for e in found] == ["agent-0000", "agent-0002"]
        await store.upsert(_entry("agent-0009"), now=NOW, max_names=100)
        assert await store.get("agent-0009", now=NOW) is not None
        found, _ = await store.query(Query(capability="memory.search"), now=NOW, limit=10)
        assert [e.name for e in found][-1] == "agent-0009"
    finally:
        other.close()
        await store.close()


async def test_free_text_and_long_pages_run_on_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "_STEPS_PER_TICK", 1)  # count every step on the loop
    store = await SqliteStore.open(tmp_path / "r.db")
    try:
        await _fill(store, 5)
        store._ticks = 0
        found, _ = await store.query(Query(words=("agent-0003",)), now=NOW, limit=10)
        assert [e.name for e in found] == ["agent-0003"]
        assert store._ticks == 0  # the loop's connection never ran it
        long_page = sqlite_store.LOOP_READ_PAGE + 1
        found, _ = await store.query(Query(capability="memory.search"), now=NOW,
                                     limit=long_page)
        assert len(found) == 5
        assert store._ticks == 0  # nor a page longer than LOOP_READ_PAGE
        found, _ = await store.query(Query(capability="memory.search"), now=NOW, limit=10)
        assert len(found) == 5
        assert store._ticks > 0  # this one it did
    finally:
        await store.close()


@given(st.floats(min_value=0, max_value=2**33, allow_nan=False, allow_infinity=False)
       | st.integers(0, 2**33).map(lambda s: s + 0.0005) | st.integers(0, 2**43).map(
           lambda ms: ms / 1000))
def test_times_are_written_as_isoformat_would(t: float) -> None:
    expected = datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")
    assert _iso(t) == expected.replace("+00:00", "Z")
