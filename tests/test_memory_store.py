from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from butler.memory_store import (
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


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "memory.sqlite3"


@pytest.fixture
def store(db_path: Path) -> Iterator[MemoryStore]:
    s = MemoryStore(db_path)
    try:
        yield s
    finally:
        s.close()


def fts_integrity_ok(path: Path) -> None:
    """Raise if the external-content FTS index disagrees with the memories table."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        conn.close()


def test_opens_with_wal_and_schema(store: MemoryStore, db_path: Path) -> None:
    assert db_path.exists()
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert {"memories", "memories_fts", "memories_ai", "memories_ad", "memories_au"} <= names


def test_write_and_read_by_id(store: MemoryStore) -> None:
    m = store.write("The office printer is on floor 3.", tags=["office", "printer"], source="alice")
    assert isinstance(m, Memory)
    assert len(m.id) == 32 and int(m.id, 16) >= 0
    assert m.key is None
    assert m.tags == ("office", "printer")
    assert m.source == "alice"
    assert m.created_at == m.updated_at
    assert store.read(m.id) == m
    assert store.read("no-such-id") is None
    assert store.read("") is None
    assert store.count() == 1


def test_write_and_read_by_key(store: MemoryStore) -> None:
    m = store.write("Wi-Fi password is hunter2", key="wifi", source="bob")
    assert m.key == "wifi"
    assert store.read("wifi") == m
    assert store.read(m.id) == m


def test_unkeyed_writes_are_distinct(store: MemoryStore) -> None:
    a = store.write("same text")
    b = store.write("same text")
    assert a.id != b.id
    assert store.count() == 2


def test_upsert_by_key_keeps_id_and_created_at(store: MemoryStore) -> None:
    first = store.write("old text about llamas", key="pet", tags=["a"], source="alice")
    second = store.write("new text about alpacas", key="pet", tags=["b", "c"], source="bob")
    assert second.id == first.id
    assert second.created_at == first.created_at
    assert second.updated_at >= first.updated_at
    assert second.text == "new text about alpacas"
    assert second.tags == ("b", "c")
    assert second.source == "bob"
    assert store.count() == 1
    assert store.read("pet") == second
    # The FTS index must follow the update, not keep the old text.
    assert store.search("llamas") == []
    assert [h.memory.id for h in store.search("alpacas")] == [first.id]


def test_id_match_wins_over_key_match(store: MemoryStore) -> None:
    a = store.write("first")
    b = store.write("second", key=a.id)
    assert store.read(a.id) == a
    assert store.delete(a.id) is True
    assert store.read(a.id) == b


def test_to_json(store: MemoryStore) -> None:
    m = store.write("hello world", key="k", tags=["t"], source="s")
    assert m.to_json() == {
        "id": m.id,
        "key": "k",
        "text": "hello world",
        "tags": ["t"],
        "source": "s",
        "created_at": m.created_at,
        "updated_at": m.updated_at,
    }
    hit = store.search("hello")[0]
    assert isinstance(hit, SearchHit)
    assert hit.to_json()["memory"] == m.to_json()
    with pytest.raises(AttributeError):
        m.text = "changed"  # type: ignore[misc]


def test_search_ranks_relevant_memory_first(store: MemoryStore) -> None:
    store.write("Lunch on Fridays is usually pizza from the corner shop.", tags=["food"])
    store.write("The quarterly report is due at the end of March.")
    target = store.write(
        "The office printer on floor 3 jams often; use the printer in room 204 instead.",
        tags=["printer", "office"],
    )
    store.write("The office kitchen coffee machine was replaced in May.", tags=["office"])
    store.write("Deploys happen on Tuesdays after standup.")

    hits = store.search("what do you know about the office printer?")
    assert hits
    assert hits[0].memory.id == target.id
    assert hits[0].score > 0
    assert all(hits[i].score >= hits[i + 1].score for i in range(len(hits) - 1))
    assert "[printer]" in hits[0].snippet.lower()
    assert "pizza" not in {w for h in hits for w in h.memory.text.lower().split()}


def test_search_matches_key_and_tags(store: MemoryStore) -> None:
    by_key = store.write("blue", key="favourite_colour")
    by_tag = store.write("some unrelated words", tags=["zebra"])
    assert [h.memory.id for h in store.search("favourite colour")] == [by_key.id]
    assert [h.memory.id for h in store.search("zebra")] == [by_tag.id]


def test_search_prefix_matching(store: MemoryStore) -> None:
    m = store.write("Kubernetes cluster upgrades are scheduled monthly.")
    assert [h.memory.id for h in store.search("kube")] == [m.id]


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
def test_hostile_queries_do_not_raise(store: MemoryStore, query: str) -> None:
    m = store.write("The office printer is broken.", tags=["printer"])
    hits = store.search(query)
    assert isinstance(hits, list)
    if "printer" in query.lower():
        assert [h.memory.id for h in hits] == [m.id]
    assert store.count() == 1


def test_match_expression_quotes_every_term() -> None:
    assert build_match_expression('What about "NEAR(xy" AND yz*?') == '"xy" OR "yz"'
    assert build_match_expression("office printer") == '"office"* OR "printer"*'
    assert build_match_expression("the what?") is None
    assert query_terms("Café CAFÉ café") == ["café"]


@pytest.mark.parametrize("query", ["", "   ", "?!", "what do you know about the", "a I"])
def test_empty_or_stopword_query_returns_nothing(store: MemoryStore, query: str) -> None:
    store.write("anything at all")
    assert store.search(query) == []


def test_diacritics_are_folded(store: MemoryStore) -> None:
    cafe = store.write("Meet at the café near the station.")
    naive = store.write("A naïve approach to résumé parsing.")
    assert [h.memory.id for h in store.search("cafe")] == [cafe.id]
    assert [h.memory.id for h in store.search("CAFÉ")] == [cafe.id]
    assert [h.memory.id for h in store.search("resume")] == [naive.id]
    assert [h.memory.id for h in store.search("naive")] == [naive.id]


def test_unicode_words(store: MemoryStore) -> None:
    m = store.write("Встреча в пятницу в Москве.")
    assert [h.memory.id for h in store.search("москве?")] == [m.id]


def test_search_limit_is_clamped(store: MemoryStore) -> None:
    for i in range(120):
        store.write(f"widget number {i}")
    assert len(store.search("widget")) == 10
    assert len(store.search("widget", limit=0)) == 1
    assert len(store.search("widget", limit=-5)) == 1
    assert len(store.search("widget", limit=3)) == 3
    assert len(store.search("widget", limit=1000)) == 100


def test_persistence_across_reopen(db_path: Path) -> None:
    s1 = MemoryStore(db_path)
    a = s1.write("Persistent fact about giraffes.", key="giraffe", tags=["animals"], source="x")
    b = s1.write("Another fact about penguins.")
    s1.close()
    s1.close()  # idempotent

    with MemoryStore(db_path) as s2:
        assert s2.count() == 2
        assert s2.read("giraffe") == a
        assert s2.read(b.id) == b
        assert [h.memory.id for h in s2.search("giraffes")] == [a.id]
        updated = s2.write("Giraffes sleep standing up.", key="giraffe")
        assert updated.id == a.id
    fts_integrity_ok(db_path)


def test_closed_store_raises(db_path: Path) -> None:
    s = MemoryStore(db_path)
    s.close()
    with pytest.raises(RuntimeError):
        s.write("x")
    with pytest.raises(RuntimeError):
        s.count()


def test_delete_removes_from_read_and_search(store: MemoryStore, db_path: Path) -> None:
    a = store.write("Elephants never forget.", key="elephant")
    b = store.write("Elephants are large.")
    assert {h.memory.id for h in store.search("elephants")} == {a.id, b.id}

    assert store.delete("elephant") is True
    assert store.read("elephant") is None
    assert store.read(a.id) is None
    assert [h.memory.id for h in store.search("elephants")] == [b.id]

    assert store.delete(b.id) is True
    assert store.search("elephants") == []
    assert store.delete(b.id) is False
    assert store.delete("") is False
    assert store.count() == 0
    fts_integrity_ok(db_path)

    # A deleted key can be reused and gets a fresh id.
    c = store.write("Elephants again.", key="elephant")
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
def test_validation_errors(store: MemoryStore, kwargs: dict[str, object], message: str) -> None:
    text = kwargs.pop("text")
    with pytest.raises(ValueError, match=message):
        store.write(text, **kwargs)  # type: ignore[arg-type]
    assert store.count() == 0


def test_validation_limits_are_inclusive(store: MemoryStore) -> None:
    m = store.write(
        "x" * MAX_TEXT_BYTES,
        key="k" * MAX_KEY_CHARS,
        tags=[f"{i:0{MAX_TAG_CHARS}d}" for i in range(MAX_TAGS)],
    )
    assert len(m.tags) == MAX_TAGS
    assert store.write("dup tags", tags=["a", "b", "a"]).tags == ("a", "b")


def test_concurrent_writers(store: MemoryStore, db_path: Path) -> None:
    threads_n, per_thread = 8, 40
    barrier = threading.Barrier(threads_n)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                store.write(f"thread {n} note {i} about concurrency", source=f"t{n}")
                # All threads fight over the same few keys.
                store.write(f"shared slot by thread {n}", key=f"shared-{i % 4}")
                store.search("concurrency note")
                store.read(f"shared-{i % 4}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []

    assert store.count() == threads_n * per_thread + 4
    assert len(store.search("concurrency", limit=100)) == 100
    for slot in range(4):
        m = store.read(f"shared-{slot}")
        assert m is not None and m.text.startswith("shared slot by thread")
    fts_integrity_ok(db_path)


def test_two_stores_on_one_file(db_path: Path) -> None:
    with MemoryStore(db_path) as s1, MemoryStore(db_path) as s2:
        errors: list[BaseException] = []

        def worker(s: MemoryStore, n: int) -> None:
            try:
                for i in range(25):
                    s.write(f"store {n} entry {i} about zeppelins")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(s, n)) for n, s in enumerate((s1, s2))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == []
        assert s1.count() == s2.count() == 50
        assert len(s2.search("zeppelins", limit=100)) == 50
    fts_integrity_ok(db_path)
