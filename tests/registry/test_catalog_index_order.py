"""The catalog index's ordered reads against a plain scan of the same entries: a listing
page read from the sorted identifiers, and a text search that reads a bounded share of
each word's postings."""

from __future__ import annotations

import random
from typing import Any

from butler.registry import catalog_index
from butler.registry.catalog_entry import A2A_CARD, MCP_CARD
from butler.registry.catalog_index import TRUST_RANK, CatalogIndex, Indexed, score

WORDS = [f"w{i}" for i in range(40)]


def filled(n: int, seed: int = 3) -> CatalogIndex:
    rng = random.Random(seed)
    index = CatalogIndex()
    for i in range(n):
        entry: dict[str, Any] = {
            "identifier": f"urn:air:p{i % 7}.example:agent:a{i}",
            "displayName": " ".join(rng.choices(WORDS, k=2)),
            "type": MCP_CARD if i % 5 == 0 else A2A_CARD,
            "url": f"https://p{i % 7}.example/a{i}.json",
            "description": " ".join(rng.choices(WORDS, k=6)),
            "tags": rng.choices(WORDS[:10], k=2)}
        # A tenth lapse at 50: a listing after that does not count them.
        expires = 50.0 if i % 10 == 3 else 1000.0
        assert index.admit(entry, origin="o", source="s", trust="local",
                           expires_at=expires, now=0) is None
    return index


def listing(index: CatalogIndex, filters: dict[str, tuple[str, ...]], now: float,
            size: int) -> tuple[list[str], int]:
    seen: list[str] = []
    after, total = "", -1
    while True:
        found = index.page(filters, after, size, now)
        assert found is not None
        page, total = found
        seen += [i.identifier for i in page]
        if len(page) < size:
            return seen, total
        after = page[-1].identifier


def test_pages_in_identifier_order_are_the_scan_sorted() -> None:
    index = filled(600)
    cases: list[dict[str, tuple[str, ...]]] = [
        {}, {"type": (MCP_CARD,)}, {"tags": ("w1", "w2")},
        {"type": (A2A_CARD,), "publisher": ("p3.example",)}, {"tags": ("nothing",)}]
    for filters in cases:
        for now in (10.0, 60.0):
            want = sorted(i.identifier for i in index.matching(filters, now))
            for size in (1, 7, 100):
                assert listing(index, filters, now, size) == (want, len(want)), filters
    assert index.page({"displayName": ("x",)}, "", 5, 0.0) is None  # not term-indexed


def brute(index: CatalogIndex, tokens: tuple[str, ...], limit: int
          ) -> list[tuple[int, Indexed]]:
    scored = [(s, i) for i in index.entries.values() if (s := score(i.weights, tokens))]
    scored.sort(key=lambda si: (-si[0], TRUST_RANK[si[1].trust], si[1].identifier))
    return scored[:limit]


def test_search_is_exact_while_its_words_fit_the_candidate_share() -> None:
    index = filled(300)
    for tokens in (("w1",), ("w5", "w30"), ("w39", "w2", "w17")):
        assert index.ranked(tokens, {}, 0.0, 15) == brute(index, tokens, 15)
    filtered = index.ranked(("w3",), {"type": (MCP_CARD,)}, 0.0, 100)
    assert filtered == [(s, i) for s, i in brute(index, ("w3",), 1000)
                        if i.entry["type"] == MCP_CARD]


def test_common_words_are_read_to_their_share_heaviest_fields_first(monkeypatch: Any) -> None:
    index = filled(2000)
    monkeypatch.setattr(catalog_index, "SEARCH_CANDIDATES", 40)
    found = index.ranked(("w1",), {}, 0.0, 10)
    # Every result really has the word, scored as a scan would; and w1 in the name or
    # tags (weight 3) comes before w1 only in the description.
    assert len(found) == 10
    assert all(s == score(i.weights, ("w1",)) > 0 for s, i in found)
    assert [s for s, _ in found] == [s for s, _ in brute(index, ("w1",), 10)]


def test_a_word_counts_where_it_weighs_most_and_ranks_by_that() -> None:
    def entry(name: str, **fields: Any) -> dict[str, Any]:
        return {"identifier": f"urn:air:p.example:agent:{name}", "displayName": name.title(),
                "type": A2A_CARD, "url": f"https://p.example/{name}.json", **fields}

    index = CatalogIndex()
    for item in (
        entry("described", description="translates poems, and poems only"),
        entry("asked", representativeQueries=["translate these poems"],
              description="poems"),
        entry("tagged", tags=["Poems"], description="poems"),
        entry("capable", capabilities=["poems.translate"]),
        entry("poems"),  # the word is its name
        entry("unrelated", description="weather by city"),
    ):
        assert index.admit(item, origin="o", source="s", trust="local", expires_at=10.0,
                           now=0) is None
    assert index.entries["urn:air:p.example:agent:asked"].weights["poems"] == 2
    assert index.entries["urn:air:p.example:agent:tagged"].weights["poems"] == 3
    found = [(s, i.identifier.rsplit(":", 1)[-1])
             for s, i in index.ranked(("poems",), {}, 0.0, 10)]
    # name, capability and tag (3) by identifier, then a representative query (2), then
    # the description alone (1); an entry without the word is not a match.
    assert found == [(100, "capable"), (100, "poems"), (100, "tagged"), (67, "asked"),
                     (33, "described")]
    two = [(s, i.identifier.rsplit(":", 1)[-1])
           for s, i in index.ranked(("poems", "translate"), {}, 0.0, 10)]
    # both words in a capability; both in a representative query; one in the name or a
    # tag; one in the description ("translates" is another word)
    assert two == [(100, "capable"), (67, "asked"), (50, "poems"), (50, "tagged"),
                   (17, "described")]
    assert index.ranked(("poems",), {}, 20.0, 10) == []  # lapsed
