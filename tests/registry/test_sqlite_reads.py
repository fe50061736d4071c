"""The SQLite registry's reads and writes: all on the file's worker thread, never on the
event loop; a read never waits for another process's write lock."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from butler.registry.card import build_entry, validate_card
from butler.registry.model import AgentEntry, _iso
from butler.registry.sqlite_store import SqliteStore
from butler.registry.store import Query
from tests.registry.registry_support import make_card

NOW = 1_800_000_000.0


def _entry(name: str, caps: tuple[str, ...] = ("memory.search",)) -> AgentEntry:
    index = validate_card(make_card(name.title(), caps=caps), max_bytes=65536)
    return build_entry(name, "alice", index, url=f"http://{name}.lan:8081", now=NOW,
                       ttl_seconds=60)


async def _fill(store: SqliteStore, count: int) -> None:
    for i in range(count):
        await store.upsert(_entry(f"agent-{i:04d}"), now=NOW, max_names=10_000)


async def test_every_statement_runs_on_the_worker_never_on_the_loop(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "r.db")
    threads: set[int] = set()
    await store._db.run(lambda conn: conn.set_trace_callback(
        lambda _sql: threads.add(threading.get_ident())))
    try:
        await _fill(store, 300)
        found, after = await store.query(Query(capability="memory.search"), now=NOW,
                                         limit=200)
        assert after == "agent-0199" and len(found) == 200
        assert await store.get("agent-0150", now=NOW) == found[150]
        found, _ = await store.query(Query(words=("agent-0003",)), now=NOW, limit=10)
        assert [e.name for e in found] == ["agent-0003"]
        assert await store.count_live(now=NOW) == 300
        assert await store.sweep(now=NOW + 3600) == 300
    finally:
        await store.close()
    assert threads and threading.get_ident() not in threads
    assert len(threads) == 1  # the one worker


async def test_reads_see_commits_and_never_wait_for_a_writer(tmp_path: Path) -> None:
    """Another process holding the write lock (an open transaction) neither blocks a
    read nor shows it uncommitted rows; once committed, the next read sees them."""
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


@given(st.floats(min_value=0, max_value=2**33, allow_nan=False, allow_infinity=False)
       | st.integers(0, 2**33).map(lambda s: s + 0.0005) | st.integers(0, 2**43).map(
           lambda ms: ms / 1000))
def test_times_are_written_as_isoformat_would(t: float) -> None:
    expected = datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")
    assert _iso(t) == expected.replace("+00:00", "Z")


_SCHEMA_V1 = """
CREATE TABLE agents (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL,
                     search_text TEXT NOT NULL, record TEXT NOT NULL);
CREATE INDEX agents_owner ON agents(owner, expires_at);
CREATE INDEX agents_expiry ON agents(expires_at);
CREATE TABLE agent_terms (kind TEXT NOT NULL, term TEXT NOT NULL, name TEXT NOT NULL,
                          PRIMARY KEY (kind, term, name)) WITHOUT ROWID;
CREATE INDEX agent_terms_name ON agent_terms(name);
PRAGMA user_version=1;
"""


async def test_a_version_1_registry_is_migrated_in_place(tmp_path: Path) -> None:
    """A registry file from before the full-text index opens with its agents indexed."""
    path = tmp_path / "r.db"
    old = sqlite3.connect(path)
    old.executescript(_SCHEMA_V1)
    for name in ("agent-0001", "agent-0002"):
        e = _entry(name)
        old.execute("INSERT INTO agents VALUES (?, ?, ?, ?, ?)",
                    (e.name, e.owner, e.expires_at, e.search_text, e.to_record()))
        old.execute("INSERT INTO agent_terms VALUES ('capability', 'memory.search', ?)",
                    (name,))
    old.commit()
    old.close()

    store = await SqliteStore.open(path)
    try:
        found, _ = await store.query(Query(words=("0002",)), now=NOW, limit=10)
        assert [e.name for e in found] == ["agent-0002"]
        found, _ = await store.query(Query(capability="memory.search"), now=NOW, limit=10)
        assert [e.name for e in found] == ["agent-0001", "agent-0002"]
        await store.upsert(_entry("agent-0003"), now=NOW, max_names=100)
        found, _ = await store.query(Query(words=("agent",)), now=NOW, limit=10)
        assert [e.name for e in found] == ["agent-0001", "agent-0002", "agent-0003"]
        assert await store.count_live(now=NOW) == 3
        assert await store.count_live(now=NOW + 3600) == 0
    finally:
        await store.close()
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA user_version").fetchone()[0] == 2
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert check.execute("INSERT INTO agents_fts(agents_fts, rank)"
                             " VALUES ('integrity-check', 1)").rowcount == 1
    finally:
        check.close()
    again = await SqliteStore.open(path)  # opening a current file changes nothing
    await again.close()
