from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from butler.memory import (
    MAX_KEY_CHARS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    MAX_TEXT_BYTES,
    Memory,
    MemoryStore,
    SearchHit,
    build_match_expression,
    query_terms,
)
from butler.storage import DatabaseClosed


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "memory.sqlite3"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[MemoryStore]:
    s = await MemoryStore.open(db_path)
    try:
        yield s
    finally:
        await s.close()


def fts_integrity_ok(path: Path) -> None:
    """Raise if the external-content FTS index disagrees with the memories table."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        conn.close()


async def test_opens_with_wal_and_schema(store: MemoryStore, db_path: Path) -> None:
    assert db_path.exists()
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert {"memories", "memories_fts", "memories_ai", "memories_ad", "memories_au"} <= names


async def test_write_and_read_by_id(store: MemoryStore) -> None:
    m = await store.write("The office printer is on floor 3.", tags=["office", "printer"],
                          source="alice")
    assert isinstance(m, Memory)
    assert len(m.id) == 32 and int(m.id, 16) >= 0
    assert m.key is None
    assert m.tags == ("office", "printer")
    assert m.source == "alice"
    assert m.created_at == m.updated_at
    assert await store.read(m.id) == m
    assert await store.read("no-such-id") is None
    assert await store.read("") is None
    assert await store.count() == 1


async def test_write_and_read_by_key(store: MemoryStore) -> None:
    m = await store.write("Wi-Fi password is hunter2", key="wifi", source="bob")
    assert m.key == "wifi"
    assert await store.read("wifi") == m
    assert await store.read(m.id) == m


async def test_unkeyed_writes_are_distinct(store: MemoryStore) -> None:
    a = await store.write("same text")
    b = await store.write("same text")
    assert a.id != b.id
    assert await store.count() == 2


async def test_upsert_by_key_keeps_id_and_created_at(store: MemoryStore) -> None:
    first = await store.write("old text about llamas", key="pet", tags=["a"], source="alice")
    second = await store.write("new text about alpacas", key="pet", tags=["b", "c"], source="bob")
    assert second.id == first.id
    assert second.created_at == first.created_at
    assert second.updated_at >= first.updated_at
    assert second.text == "new text about alpacas"
    assert second.tags == ("b", "c")
    assert second.source == "bob"
    assert await store.count() == 1
    assert await store.read("pet") == second
    # The FTS index must follow the update, not keep the old text.
    assert await store.search("llamas") == []
    assert [h.memory.id for h in await store.search("alpacas")] == [first.id]


async def test_id_match_wins_over_key_match(store: MemoryStore) -> None:
    a = await store.write("first")
    b = await store.write("second", key=a.id)
    assert await store.read(a.id) == a
    assert await store.delete(a.id) is True
    assert await store.read(a.id) == b


async def test_to_json(store: MemoryStore) -> None:
    m = await store.write("hello world", key="k", tags=["t"], source="s")
    assert m.to_json() == {
        "id": m.id,
        "key": "k",
        "text": "hello world",
        "tags": ["t"],
        "source": "s",
        "created_at": m.created_at,
        "updated_at": m.updated_at,
    }
    hit = (await store.search("hello"))[0]
    assert isinstance(hit, SearchHit)
    assert hit.to_json()["memory"] == m.to_json()
    with pytest.raises(AttributeError):
        m.text = "changed"  # type: ignore[misc]


async def test_search_ranks_relevant_memory_first(store: MemoryStore) -> None:
    await store.write("Lunch on Fridays is usually pizza from the corner shop.", tags=["food"])
    await store.write("The quarterly report is due at the end of March.")
    target = await store.write(
        "The office printer on floor 3 jams often; use the printer in room 204 instead.",
        tags=["printer", "office"],
    )
    await store.write("The office kitchen coffee machine was replaced in May.", tags=["office"])
    await store.write("Deploys happen on Tuesdays after standup.")

    hits = await store.search("what do you know about the office printer?")
    assert hits
    assert hits[0].memory.id == target.id
    assert hits[0].score > 0
    assert all(hits[i].score >= hits[i + 1].score for i in range(len(hits) - 1))
    assert "[printer]" in hits[0].snippet.lower()
    assert "pizza" not in {w for h in hits for w in h.memory.text.lower().split()}


async def test_search_matches_key_and_tags(store: MemoryStore) -> None:
    by_key = await store.write("blue", key="favourite_colour")
    by_tag = await store.write("some unrelated words", tags=["zebra"])
    assert [h.memory.id for h in await store.search("favourite colour")] == [by_key.id]
    assert [h.memory.id for h in await store.search("zebra")] == [by_tag.id]


async def test_search_prefix_matching(store: MemoryStore) -> None:
    m = await store.write("Kubernetes cluster upgrades are scheduled monthly.")
    assert [h.memory.id for h in await store.search("kube")] == [m.id]


@pytest.mark.parametrize(
    "query",
    [
        'what about "printer',
        "printer AND",
        "AND OR NOT",
        "NEAR(printer office",
        "NEAR(",
        '"',
        '""',
        "*",
        "printer*",
        "-printer",
        "- -",
        "text:printer",
        "{text key}: printer",
        "^printer",
        "printer + office ) (",
        "'; DROP TABLE memories; --",
        "?!.,;:()[]{}<>/\\|@#$%^&*~`",
        "office\x00printer",
        "printer " * 500,
        "\u200b\ufeff",
    ],
)
async def test_hostile_queries_do_not_raise(store: MemoryStore, query: str) -> None:
    m = await store.write("The office printer is broken.", tags=["printer"])
    hits = await store.search(query)
    assert isinstance(hits, list)
    if "printer" in query.lower():
        assert [h.memory.id for h in hits] == [m.id]
    assert await store.count() == 1


def test_match_expression_quotes_every_term() -> None:
    assert build_match_expression('What about "NEAR(xy" AND yz*?') == '"xy" OR "yz"'
    assert build_match_expression("office printer") == '"office"* OR "printer"*'
    assert build_match_expression("the what?") is None
    assert query_terms("Café CAFÉ café") == ["café"]


@pytest.mark.parametrize("query", ["", "   ", "?!", "what do you know about the", "a I"])
async def test_empty_or_stopword_query_returns_nothing(store: MemoryStore, query: str) -> None:
    await store.write("anything at all")
    assert await store.search(query) == []


async def test_diacritics_are_folded(store: MemoryStore) -> None:
    cafe = await store.write("Meet at the café near the station.")
    naive = await store.write("A naïve approach to résumé parsing.")
    assert [h.memory.id for h in await store.search("cafe")] == [cafe.id]
    assert [h.memory.id for h in await store.search("CAFÉ")] == [cafe.id]
    assert [h.memory.id for h in await store.search("resume")] == [naive.id]
    assert [h.memory.id for h in await store.search("naive")] == [naive.id]


async def test_unicode_words(store: MemoryStore) -> None:
    m = await store.write("Встреча в пятницу в Москве.")
    assert [h.memory.id for h in await store.search("москве?")] == [m.id]


async def test_search_limit_is_clamped(store: MemoryStore) -> None:
    for i in range(120):
        await store.write(f"widget number {i}")
    assert len(await store.search("widget")) == 10
    assert len(await store.search("widget", limit=0)) == 1
    assert len(await store.search("widget", limit=-5)) == 1
    assert len(await store.search("widget", limit=3)) == 3
    assert len(await store.search("widget", limit=1000)) == 100


async def test_persistence_across_reopen(db_path: Path) -> None:
    s1 = await MemoryStore.open(db_path)
    a = await s1.write("Persistent fact about giraffes.", key="giraffe", tags=["animals"],
                       source="x")
    b = await s1.write("Another fact about penguins.")
    await s1.close()
    await s1.close()  # idempotent

    s2 = await MemoryStore.open(db_path)
    try:
        assert await s2.count() == 2
        assert await s2.read("giraffe") == a
        assert await s2.read(b.id) == b
        assert [h.memory.id for h in await s2.search("giraffes")] == [a.id]
        updated = await s2.write("Giraffes sleep standing up.", key="giraffe")
        assert updated.id == a.id
    finally:
        await s2.close()
    fts_integrity_ok(db_path)


async def test_closed_store_raises(db_path: Path) -> None:
    s = await MemoryStore.open(db_path)
    await s.close()
    with pytest.raises(DatabaseClosed):
        await s.write("x")
    with pytest.raises(DatabaseClosed):
        await s.count()


async def test_delete_removes_from_read_and_search(store: MemoryStore, db_path: Path) -> None:
    a = await store.write("Elephants never forget.", key="elephant")
    b = await store.write("Elephants are large.")
    assert {h.memory.id for h in await store.search("elephants")} == {a.id, b.id}

    assert await store.delete("elephant") is True
    assert await store.read("elephant") is None
    assert await store.read(a.id) is None
    assert [h.memory.id for h in await store.search("elephants")] == [b.id]

    assert await store.delete(b.id) is True
    assert await store.search("elephants") == []
    assert await store.delete(b.id) is False
    assert await store.delete("") is False
    assert await store.count() == 0
    fts_integrity_ok(db_path)

    # A deleted key can be reused and gets a fresh id.
    c = await store.write("Elephants again.", key="elephant")
    assert c.id != a.id


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"text": ""}, "empty"),
        ({"text": "   \n\t"}, "empty"),
        ({"text": "x" * (MAX_TEXT_BYTES + 1)}, "limit"),
        ({"text": "é" * (MAX_TEXT_BYTES // 2 + 1)}, "bytes"),
        ({"text": "ok", "key": ""}, "key"),
        ({"text": "ok", "key": "k" * (MAX_KEY_CHARS + 1)}, "key"),
        ({"text": "ok", "tags": ["t"] * (MAX_TAGS + 1)}, "tags"),
        ({"text": "ok", "tags": ["t" * (MAX_TAG_CHARS + 1)]}, "tag"),
        ({"text": "ok", "tags": [""]}, "tag"),
        ({"text": "ok", "tags": "notalist"}, "list"),
        ({"text": "ok", "tags": [1]}, "string"),
        ({"text": 5}, "string"),
        ({"text": "ok", "source": None}, "source"),
    ],
)
async def test_validation_errors(store: MemoryStore, kwargs: dict[str, object],
                                 message: str) -> None:
    text = kwargs.pop("text")
    with pytest.raises(ValueError, match=message):
        await store.write(text, **kwargs)  # type: ignore[arg-type]
    assert await store.count() == 0


async def test_validation_limits_are_inclusive(store: MemoryStore) -> None:
    m = await store.write(
        "x" * MAX_TEXT_BYTES,
        key="k" * MAX_KEY_CHARS,
        tags=[f"{i:0{MAX_TAG_CHARS}d}" for i in range(MAX_TAGS)],
    )
    assert len(m.tags) == MAX_TAGS
    assert (await store.write("dup tags", tags=["a", "b", "a"])).tags == ("a", "b")


async def test_concurrent_writers(store: MemoryStore, db_path: Path) -> None:
    writers_n, per_writer = 8, 40

    async def writer(n: int) -> None:
        for i in range(per_writer):
            await store.write(f"writer {n} note {i} about concurrency", source=f"w{n}")
            # All writers fight over the same few keys.
            await store.write(f"shared slot by writer {n}", key=f"shared-{i % 4}")
            await store.search("concurrency note")
            await store.read(f"shared-{i % 4}")

    await asyncio.gather(*(writer(n) for n in range(writers_n)))
    assert await store.count() == writers_n * per_writer + 4
    assert len(await store.search("concurrency", limit=100)) == 100
    for slot in range(4):
        m = await store.read(f"shared-{slot}")
        assert m is not None and m.text.startswith("shared slot by writer")
    fts_integrity_ok(db_path)


async def test_two_stores_on_one_file(db_path: Path) -> None:
    """Two connections, each on its own worker, writing the one file at once."""
    s1, s2 = await MemoryStore.open(db_path), await MemoryStore.open(db_path)
    try:
        async def writer(s: MemoryStore, n: int) -> None:
            for i in range(25):
                await s.write(f"store {n} entry {i} about zeppelins")

        await asyncio.gather(writer(s1, 1), writer(s2, 2))
        assert await s1.count() == await s2.count() == 50
        assert len(await s2.search("zeppelins", limit=100)) == 50
    finally:
        await s1.close()
        await s2.close()
    fts_integrity_ok(db_path)
