"""bench/intent, the intent router's public evaluation: its data keeps the promises the
README makes (size, mix, split, no request copied from the tests), and its baselines and
scoring compute what they say. The evaluation itself runs in bench (``bash bench/run
--only intent``), not here."""

from __future__ import annotations

import importlib
import json
import math
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
INTENT = ROOT / "bench" / "intent"


def _bench(name: str) -> ModuleType:
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    return importlib.import_module(f"intent.{name}")


dataset = _bench("dataset")
baselines = _bench("baselines")


@pytest.fixture(scope="module")
def halves() -> dict[str, list[Any]]:
    return {h: dataset.load_half(h) for h in dataset.HALVES}


def test_the_data_checks_out(halves: dict[str, list[Any]]) -> None:
    found = dict(halves, hostile=dataset.load_requests(dataset.HOSTILE / "requests.jsonl"))
    assert dataset.problems(dataset.load_cards(), found) == []


def test_a_request_in_the_wrong_half_or_for_no_skill_is_reported() -> None:
    cards = dataset.load_cards()
    text = "hold the front page"
    wrong = "test" if dataset.split_of(text) == "tuning" else "tuning"
    bad = dataset.Request(dataset.request_id(text), text, "office/office.nothing", "plain")
    found = dataset.problems(cards, {wrong: [bad]})
    assert any("belongs in" in p for p in found)
    assert any("is on no card" in p for p in found)


def test_the_mix_the_issue_asks_for(halves: dict[str, list[Any]]) -> None:
    rows = halves["tuning"] + halves["test"]
    cards = dataset.load_cards()
    assert 1 + len(cards.peers) >= 8
    assert len(rows) >= 300
    cats = [r.category for r in rows]
    near = cats.count("near_miss") + cats.count("out_of_scope_near_miss")
    assert near >= 0.25 * len(rows)
    assert sum(r.declines for r in rows) >= 0.15 * len(rows)
    assert {"typo", "paragraph", "stop_words", "non_english", "names_peer"} <= set(cats)
    assert {"es", "fr", "de", "ja"} <= {r.lang for r in rows}
    for r in rows:
        if r.category == "paragraph":
            assert 3 <= len(re.findall(r"[.?!](?:\s|$)", r.text)) <= 6, r.text
    # Both halves have some of every category, so a router tuned on one is tested on all.
    for half in halves.values():
        assert {r.category for r in half} == set(cats)


def _phrases(path: Path) -> str:
    return " " + " ".join(re.findall(r"[a-z0-9']+", path.read_text().lower())) + " "


def test_no_request_reuses_a_phrasing_of_the_tests(halves: dict[str, list[Any]]) -> None:
    """No run of five words of a request appears in the router's tests or its page."""
    known = "".join(_phrases(ROOT / p) for p in ("tests/test_intent_router.py",
                                                  "tests/test_intent_routing.py",
                                                  "docs/intent.md"))
    copied = []
    for r in halves["tuning"] + halves["test"]:
        said = re.findall(r"[a-z0-9']+", r.text.lower())
        runs = {" " + " ".join(said[i:i + 5]) + " " for i in range(len(said) - 4)}
        copied += [(r.text, run) for run in runs if run in known]
    assert copied == []


def test_bm25_scores_as_okapi_does() -> None:
    docs = ["translate text language", "currency exchange rate", "weather forecast rain rain"]
    bm = baselines.Bm25(docs)
    n, avg = 3, (3 + 3 + 4) / 3
    idf = math.log(1 + (n - 1 + 0.5) / (1 + 0.5))
    tf, length = 2, 4
    expected = idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * length / avg))
    scores = bm.scores("will it rain?")
    assert scores[:2] == [0.0, 0.0]
    assert scores[2] == pytest.approx(expected)
    assert bm.scores("hello, can you") == [0.0, 0.0, 0.0]  # stop words only


def test_tfidf_over_character_ngrams_forgives_typos() -> None:
    docs = ["weather forecast", "currency exchange", "translate text"]
    tfidf = baselines.CharTfidf(docs)
    assert tfidf.scores("weather forecast")[0] == pytest.approx(1.0)
    scores = tfidf.scores("wether forcast")
    assert scores.index(max(scores)) == 0 and 0 < scores[0] < 1
    assert baselines.char_ngrams("ab") == {" ab": 1, "ab ": 1, " ab ": 1}


def test_a_baseline_declines_under_its_threshold() -> None:
    base = baselines.Baseline("bm25", baselines.Bm25(["notes", "weather"]).scores,
                              ["home/notes", "skycast/weather"])
    base.threshold = math.inf
    assert base.decide("weather") == (None, ["skycast/weather"])
    base.threshold = 0.1
    assert base.decide("weather")[0] == "skycast/weather"


def test_the_threshold_is_the_cut_that_gets_most_right() -> None:
    # (best score, best candidate right, should decline)
    tops = [(0.9, True, False), (0.8, True, False), (0.3, False, True), (0.2, False, True),
            (0.5, False, False)]
    cut = baselines.choose_threshold(tops)
    assert 0.3 < cut <= 0.8
    assert baselines.choose_threshold([(0.4, False, True)]) > 0.4  # decline everything


def test_a_label_is_right_for_its_skill_or_for_a_request_naming_only_its_agent() -> None:
    right = dataset.right
    assert right("office/office.minutes", "office/office.minutes")
    assert not right("office/office.minutes", "office")  # the peer as a whole
    assert right("office", "office/office.calendar")
    assert not right("office", None)


def test_the_hostile_cards_target_requests_of_other_agents() -> None:
    cards = dataset.load_cards()
    targets = dataset.load_requests(dataset.HOSTILE / "requests.jsonl")
    hostile = {entry["name"] for _, entry, _ in cards.hostile}
    assert len(cards.hostile) == 3 and not any(r.agent in hostile for r in targets)
    clone = json.loads((dataset.HOSTILE / "clone.json").read_text())
    office = json.loads((dataset.CARDS / "office.json").read_text())
    assert clone["card"]["skills"] == office["card"]["skills"]
    assert clone["peer"]["identity_key"] != office["peer"]["identity_key"]


def test_a_request_naming_its_agent_may_go_to_that_agent_as_a_whole() -> None:
    named = dataset.Request("x", "ask my office what's due", "office/office.action_items",
                            "names_peer")
    plain = dataset.Request("y", "what's due at work", "office/office.action_items", "plain")
    assert named.accepts("office") and named.accepts("office/office.action_items")
    assert not plain.accepts("office") and not named.accepts("office/office.minutes")
    assert dataset.Request("z", "hello", "decline", "stop_words").accepts(None)
