"""One behaviour suite, run against every store (SQLite file and a real redis-server)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from butler.registry.card import build_entry, validate_card
from butler.registry.clock import ManualClock
from butler.registry.model import AgentEntry
from butler.registry.sqlite_store import SqliteStore, query_sql
from butler.registry.store import AgentNotFound, NameOwned, Query, QuotaExceeded, RegistryStore
from tests.registry.registry_support import StoreFactory, make_card

MAX = 16


def entry(name: str, owner: str = "alice", *, now: float, ttl: int = 60,
          caps: tuple[str, ...] = ("memory.search",), description: str = "an agent",
          skills: list[dict[str, object]] | None = None) -> AgentEntry:
    card = make_card(name.title(), caps=caps, description=description, skills=skills)
    index = validate_card(card, max_bytes=65536)
    return build_entry(name, owner, index, url=f"http://{name}.lan:8081", now=now,
                       ttl_seconds=ttl)


async def names(store: RegistryStore, now: float, query: Query | None = None) -> list[str]:
    found, _ = await store.query(query or Query(), now=now, limit=1000)
    return [e.name for e in found]


async def test_register_get_and_refresh(store: RegistryStore, clock: ManualClock) -> None:
    first, created = await store.upsert(entry("office", now=clock.now()), now=clock.now(),
                                        max_names=MAX)
    assert created
    got = await store.get("office", now=clock.now())
    assert got is not None
    assert got.owner == "alice" and got.url == "http://office.lan:8081"
    assert got.capabilities == ("memory.search",)
    assert got.skills == ("search",)
    assert got.tags == ("memory", "search")
    assert got.card["skills"][0]["cost_usd"] == "0.01"

    clock.advance(30)
    again, created = await store.upsert(entry("office", now=clock.now(), caps=("echo",)),
                                        now=clock.now(), max_names=MAX)
    assert not created
    assert again.registered_at == first.registered_at
    assert again.expires_at == clock.now() + 60
    refreshed = await store.get("office", now=clock.now())
    assert refreshed is not None and refreshed.registered_at == first.registered_at
    # The refreshed card replaced the old index entries: "echo" was added, the rest kept.
    assert await names(store, clock.now(), Query(capability="echo")) == ["office"]
    assert await store.count_live(now=clock.now()) == 1  # a refresh is not a new agent


async def test_query_by_capability_skill_tag_and_text(
    store: RegistryStore, clock: ManualClock
) -> None:
    now = clock.now()
    translate: list[dict[str, object]] = [{
        "id": "translate", "name": "Translator", "description": "Translates text",
        "capabilities": ["text.translate"], "tags": ["language"],
    }]
    await store.upsert(entry("office", now=now), now=now, max_names=MAX)
    await store.upsert(entry("home", now=now, caps=(), skills=translate,
                             description="Lives in the kitchen"), now=now, max_names=MAX)
    await store.upsert(entry("lab", now=now, caps=("memory.search", "gpu.run"),
                             description="Kitchen sink of tools"), now=now, max_names=MAX)

    assert await names(store, now, Query(capability="memory.search")) == ["lab", "office"]
    assert await names(store, now, Query(capability="text.translate")) == ["home"]
    assert await names(store, now, Query(skill="translate")) == ["home"]
    assert await names(store, now, Query(tag="language")) == ["home"]
    assert await names(store, now, Query(tag="search")) == ["lab", "office"]
    assert await names(store, now, Query(words=("kitchen",))) == ["home", "lab"]
    assert await names(store, now, Query(words=("kitchen", "sink"))) == ["lab"]
    assert await names(store, now, Query(words=("translator",))) == ["home"]
    assert await names(store, now, Query(capability="memory.search", tag="search",
                                         words=("sink",))) == ["lab"]
    assert await names(store, now, Query(capability="nobody.has.this")) == []
    assert await names(store, now) == ["home", "lab", "office"]


async def test_free_text_matches_whole_words_and_follows_every_write(
    store: RegistryStore, clock: ManualClock
) -> None:
    now = clock.now()
    await store.upsert(entry("office", now=now, description="Kitchen timer, C++ tools"),
                       now=now, max_names=MAX)
    await store.upsert(entry("lab", now=now, ttl=10, description="Lab bench"), now=now,
                       max_names=MAX)
    assert await names(store, now, Query(words=("kitchen",))) == ["office"]
    assert await names(store, now, Query(words=("kitch",))) == []  # whole words only
    assert await names(store, now, Query(words=("timer,",))) == ["office"]
    assert await names(store, now, Query(words=("c++",))) == ["office"]
    assert await names(store, now, Query(words=("++",))) == ["office"]  # no word: substring
    assert await names(store, now, Query(words=("c++", "kitchen"))) == ["office"]
    assert await names(store, now, Query(words=("kitchen", "lab"))) == []
    # A new card replaces the old words; a heartbeat keeps them.
    await store.upsert(entry("office", now=now, description="Garden shed"), now=now,
                       max_names=MAX)
    assert await names(store, now, Query(words=("kitchen",))) == []
    await store.heartbeat("office", "alice", now=now, ttl_seconds=60)
    assert await names(store, now, Query(words=("garden", "shed"))) == ["office"]
    await store.delete("office", "alice", now=now)
    assert await names(store, now, Query(words=("garden",))) == []
    assert await names(store, now, Query(words=("bench",))) == ["lab"]
    clock.advance(11)
    assert await names(store, clock.now(), Query(words=("bench",))) == []
    assert await store.sweep(now=clock.now()) == 1
    await store.upsert(entry("lab", "bob", now=clock.now(), description="Quiet room"),
                       now=clock.now(), max_names=MAX)
    assert await names(store, clock.now(), Query(words=("bench",))) == []
    assert await names(store, clock.now(), Query(words=("quiet",))) == ["lab"]
    assert await store.count_live(now=clock.now()) == 1
    assert await store.count_live(now=clock.now() + 61) == 0


async def test_common_and_rare_words_page_alike(store: RegistryStore, clock: ManualClock) -> None:
    """A word most agents have and one few have: the stores walk different indexes for
    them (SQLite past about 100 matches), and both give every match once, in order."""
    now = clock.now()
    for i in range(150):
        await store.upsert(entry(f"a{i:03d}", now=now, description=f"common rare{i % 50}"),
                           now=now, max_names=1000)
    for query, expected in (
        (Query(words=("common",)), [f"a{i:03d}" for i in range(150)]),
        (Query(words=("rare7",)), ["a007", "a057", "a107"]),
        (Query(words=("rare7", "common"), capability="memory.search"),
         ["a007", "a057", "a107"]),
    ):
        seen: list[str] = []
        after: str | None = None
        while True:
            page, after = await store.query(query, now=now, limit=7, after=after)
            seen += [e.name for e in page]
            if after is None:
                break
        assert seen == expected, query


@pytest.mark.parametrize("query", [Query(), Query(capability="memory.search")])
async def test_pagination_walks_every_live_agent_once(
    store: RegistryStore, clock: ManualClock, query: Query
) -> None:
    now = clock.now()
    for i in range(25):
        await store.upsert(entry(f"agent-{i:02d}", now=now), now=now, max_names=100)
    await store.upsert(entry("agent-99", now=now, ttl=1), now=now, max_names=100)
    clock.advance(5)  # agent-99 has expired; it must not appear on any page
    seen: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        page, after = await store.query(query, now=clock.now(), limit=10, after=after)
        seen += [e.name for e in page]
        pages += 1
        if after is None:
            break
    assert seen == [f"agent-{i:02d}" for i in range(25)]
    assert pages == 3


async def test_exact_page_boundary_has_no_empty_extra_page(
    store: RegistryStore, clock: ManualClock
) -> None:
    now = clock.now()
    for i in range(10):
        await store.upsert(entry(f"a{i}", now=now), now=now, max_names=100)
    page, after = await store.query(Query(), now=now, limit=10)
    assert len(page) == 10 and after is None


async def test_expiry_follows_the_clock_not_the_sweep(
    store: RegistryStore, clock: ManualClock
) -> None:
    await store.upsert(entry("office", now=clock.now(), ttl=60), now=clock.now(), max_names=MAX)
    clock.advance(59.9)
    assert await store.get("office", now=clock.now()) is not None
    assert await store.count_live(now=clock.now()) == 1
    clock.advance(0.1)  # exactly at expires_at: gone, with no sweep having run
    assert await store.get("office", now=clock.now()) is None
    assert await names(store, clock.now()) == []
    assert await names(store, clock.now(), Query(capability="memory.search")) == []
    assert await store.count_live(now=clock.now()) == 0
    with pytest.raises(AgentNotFound):
        await store.heartbeat("office", "alice", now=clock.now(), ttl_seconds=60)
    assert await store.sweep(now=clock.now()) == 1
    assert await store.sweep(now=clock.now()) == 0


async def test_heartbeat_extends_ttl(store: RegistryStore, clock: ManualClock) -> None:
    await store.upsert(entry("office", now=clock.now(), ttl=60), now=clock.now(), max_names=MAX)
    clock.advance(50)
    beat = await store.heartbeat("office", "alice", now=clock.now(), ttl_seconds=120)
    assert beat.expires_at == clock.now() + 120 and beat.ttl_seconds == 120
    clock.advance(100)
    assert await store.get("office", now=clock.now()) is not None
    assert await store.sweep(now=clock.now()) == 0
    assert await names(store, clock.now(), Query(capability="memory.search")) == ["office"]


async def test_restart_neither_revives_nor_expires_early(
    store_factory: StoreFactory, clock: ManualClock
) -> None:
    store = await store_factory()
    now = clock.now()
    await store.upsert(entry("short", now=now, ttl=60), now=now, max_names=MAX)
    await store.upsert(entry("long", now=now, ttl=600), now=now, max_names=MAX)
    await store.close()

    clock.advance(120)
    store = await store_factory()
    assert await names(store, clock.now()) == ["long"]
    assert await store.get("short", now=clock.now()) is None
    await store.close()

    store = await store_factory()  # a restart with no time passing changes nothing
    assert await names(store, clock.now(), Query(capability="memory.search")) == ["long"]
    assert await store.sweep(now=clock.now()) == 1
    clock.advance(479)
    assert await names(store, clock.now()) == ["long"]
    clock.advance(1)
    assert await names(store, clock.now()) == []


async def test_ownership(store: RegistryStore, clock: ManualClock) -> None:
    now = clock.now()
    original, _ = await store.upsert(entry("office", now=now), now=now, max_names=MAX)
    with pytest.raises(NameOwned):
        await store.upsert(entry("office", "bob", now=now, caps=("evil",)), now=now,
                           max_names=MAX)
    with pytest.raises(NameOwned):
        await store.heartbeat("office", "bob", now=now, ttl_seconds=3600)
    with pytest.raises(NameOwned):
        await store.delete("office", "bob", now=now)
    assert await store.get("office", now=now) == original
    assert await names(store, now, Query(capability="evil")) == []
    await store.delete("office", "root", now=now, force=True)
    assert await store.get("office", now=now) is None


async def test_expired_name_is_free_again(store: RegistryStore, clock: ManualClock) -> None:
    await store.upsert(entry("office", now=clock.now(), ttl=60), now=clock.now(), max_names=MAX)
    clock.advance(61)
    _, created = await store.upsert(entry("office", "bob", now=clock.now(), caps=("echo",)),
                                    now=clock.now(), max_names=MAX)
    assert created
    got = await store.get("office", now=clock.now())
    assert got is not None and got.owner == "bob"
    # The old owner's index entries went with the old entry.
    assert await names(store, clock.now(), Query(capability="memory.search")) == ["office"]
    assert await names(store, clock.now(), Query(capability="echo")) == ["office"]
    await store.upsert(entry("other", now=clock.now()), now=clock.now(), max_names=1)


async def test_cap_on_names_per_identity(store: RegistryStore, clock: ManualClock) -> None:
    now = clock.now()
    for name in ("a", "b", "c"):
        await store.upsert(entry(name, now=now, ttl=60), now=now, max_names=3)
    with pytest.raises(QuotaExceeded):
        await store.upsert(entry("d", now=now), now=now, max_names=3)
    assert await names(store, now) == ["a", "b", "c"]
    await store.upsert(entry("c", now=now), now=now, max_names=3)  # a refresh is not a new name
    await store.upsert(entry("x", "bob", now=now), now=now, max_names=3)  # caps are per identity
    await store.delete("a", "alice", now=now)
    await store.upsert(entry("d", now=now), now=now, max_names=3)
    clock.advance(61)
    await store.upsert(entry("e", now=clock.now()), now=clock.now(), max_names=1)


async def test_delete(store: RegistryStore, clock: ManualClock) -> None:
    now = clock.now()
    await store.upsert(entry("office", now=now), now=now, max_names=MAX)
    await store.delete("office", "alice", now=now)
    assert await store.get("office", now=now) is None
    assert await names(store, now, Query(capability="memory.search")) == []
    with pytest.raises(AgentNotFound):
        await store.delete("office", "alice", now=now)
    assert await store.count_live(now=now) == 0


async def test_sqlite_capability_query_uses_the_term_index(tmp_path: Path) -> None:
    """Guards the 100k-agent case: the capability index drives the scan, never a walk
    over every agent."""
    store = await SqliteStore.open(tmp_path / "r.db")
    await store.close()
    sql, params = query_sql(Query(capability="memory.search", tag="x", words=("w",)),
                            now=0.0, limit=10, after="")
    with sqlite3.connect(tmp_path / "r.db") as conn:
        plan = " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    conn.close()
    assert plan.startswith("SEARCH t USING PRIMARY KEY (kind=? AND term=? AND name>?)"), plan
    # The only SCAN allowed is the full-text index's own lookup (a MATCH on FTS5).
    assert plan.count("SCAN") == 1 and "SCAN f VIRTUAL TABLE INDEX 0:=M" in plan, plan


@pytest.mark.parametrize("fts_drives", [True, False])
async def test_sqlite_free_text_query_uses_the_full_text_index(tmp_path: Path,
                                                               fts_drives: bool) -> None:
    """Few matches: the FTS5 index drives; many: names in order, each probed in it."""
    store = await SqliteStore.open(tmp_path / "r.db")
    await store.close()
    sql, params = query_sql(Query(words=("kitchen",)), now=0.0, limit=10, after="",
                            fts_drives=fts_drives)
    with sqlite3.connect(tmp_path / "r.db") as conn:
        plan = " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    conn.close()
    first = ("SCAN f VIRTUAL TABLE INDEX 0:M" if fts_drives
             else "SEARCH a USING INDEX sqlite_autoindex_agents_1 (name>?)")
    assert plan.startswith(first), plan
    assert plan.count("SCAN") == 1 and "VIRTUAL TABLE INDEX" in plan, plan


async def test_two_replicas_cannot_both_claim_a_name(
    store_factory: StoreFactory, clock: ManualClock
) -> None:
    """Two stores on one backing store (replicas sharing Redis, or one SQLite file)."""
    first, second = await store_factory(), await store_factory()
    now = clock.now()
    for round_ in range(20):
        name = f"contested-{round_}"
        results = await asyncio.gather(
            first.upsert(entry(name, "alice", now=now), now=now, max_names=100),
            second.upsert(entry(name, "bob", now=now), now=now, max_names=100),
            return_exceptions=True,
        )
        assert sorted(type(r).__name__ for r in results) == ["NameOwned", "tuple"], results
        winner = await first.get(name, now=now)
        assert winner is not None
        assert winner == await second.get(name, now=now)


async def test_redis_agents_stored_before_the_word_sets_are_indexed_on_open(
    redis_url: str, clock: ManualClock
) -> None:
    """Keys written before free text was indexed (no word sets, no schema key) get their
    word sets when a registry next opens the store."""
    import uuid

    from butler.registry.redis_store import RedisStore

    prefix = f"test:{uuid.uuid4().hex}:"
    store = await RedisStore.open(redis_url, prefix=prefix)
    now = clock.now()
    try:
        for name, words in (("office", "Kitchen timer"), ("lab", "Garden kitchen")):
            await store.upsert(entry(name, now=now, description=words), now=now, max_names=MAX)
        r = store._r
        for key in await r.keys(f"{prefix}idx:word:*"):
            await r.delete(key)
        for name in ("office", "lab"):
            terms = json.loads(await r.hget(f"{prefix}agent:{name}", "terms"))
            await r.hset(f"{prefix}agent:{name}", "terms",
                         json.dumps([k for k in terms if ":word:" not in k]))
        await r.delete(f"{prefix}schema")
        assert await names(store, now, Query(words=("kitchen",))) == []
    finally:
        await store.close()
    store = await RedisStore.open(redis_url, prefix=prefix)
    try:
        assert await names(store, now, Query(words=("kitchen",))) == ["lab", "office"]
        assert await names(store, now, Query(words=("garden",))) == ["lab"]
        await store.delete("lab", "alice", now=now)  # its word sets go with it
        assert await store._r.exists(f"{prefix}idx:word:garden") == 0
    finally:
        await store.close()


async def test_ping_answers_while_the_store_does(store: RegistryStore) -> None:
    await store.ping()  # what /healthz asks: cheap at any size, unlike count_live


async def test_ping_of_an_unreachable_redis_is_unavailable() -> None:
    import redis.asyncio

    from butler.registry.redis_store import RedisStore
    from internal.protocol.a2a.model import Unavailable
    from tests.registry.registry_support import free_port

    store = RedisStore(redis.asyncio.from_url(f"redis://127.0.0.1:{free_port()}/0"))
    try:
        with pytest.raises(Unavailable):
            await store.ping()
    finally:
        await store.close()
