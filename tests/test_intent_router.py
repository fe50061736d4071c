"""The intent router alone (``butler.routing``): realistic cards, plain-language tasks,
the choice or the refusal each should get, and what ``explain`` shows."""

from __future__ import annotations

from decimal import Decimal

import pytest

from butler.routing import RouteCandidate, RouteIndex, explain
from butler.routing.lexical import LexicalIndex
from butler.routing.ngrams import EDIT_SIMILARITY, SpellingIndex
from butler.routing.router import ROUTED_CHARS
from butler.routing.words import words

C = RouteCandidate
CARDS = [
    C("home.lights", name="Lights", tags=("lights", "lamp", "home automation"),
      description="Turn lights on or off and dim them in any room of the house",
      examples=("turn off the kitchen lights", "dim the living room lamp"),
      capabilities=("home.lights",)),
    C("home.thermostat", name="Thermostat", description="Read and set the heating temperature",
      tags=("heating", "temperature", "thermostat", "warm", "cold", "home automation"),
      examples=("set the heating to 21 degrees", "how warm is it inside"),
      capabilities=("home.climate",)),
    C("home.locks", name="Door locks", tags=("door", "lock", "security"),
      description="Lock or unlock the front and back doors and report whether they are locked",
      examples=("lock the front door", "is the back door locked"), capabilities=("home.locks",)),
    C("notes.write", name="Write a note", tags=("notes", "reminder", "remember"),
      description="Save a short note or reminder to remember later",
      examples=("remember that the plumber comes on Tuesday", "note down the wifi password"),
      capabilities=("notes.write",)),
    C("notes.search", name="Search notes", tags=("notes", "search", "recall"),
      description="Find notes you saved before by their words",
      examples=("what did I note about the plumber",), capabilities=("notes.search",)),
    C("calendar.agenda", name="Calendar agenda",
      tags=("calendar", "agenda", "meetings", "schedule", "appointments"),
      description="List upcoming events and meetings from the family calendar",
      examples=("what is on my calendar tomorrow", "when is my next appointment"),
      capabilities=("calendar.read",)),
    C("calendar.add", name="Add calendar event", tags=("calendar", "event", "booking"),
      description="Create an event or book a meeting in the calendar",
      examples=("book a dentist appointment on friday at 10",),
      capabilities=("calendar.write",)),
    C("files.find", name="Find files", tags=("files", "documents", "drive", "pdf"),
      description="Search documents and files in the shared drive by name or content",
      examples=("find the lease contract pdf",), capabilities=("files.search",)),
    C("echo", name="echo", description="Repeat the text back", capabilities=("echo",)),
    C("", peer="office", name="Office Butler", description="the office",
      capabilities=("memory.search", "action_items"), source="config",
      cost_usd=Decimal("0.01")),
    C("office.action_items", peer="office", name="Action items",
      description="Pending action items and to-dos from office meetings",
      tags=("action items", "todo", "tasks", "follow-ups"),
      examples=("any pending action items from the team meeting",),
      capabilities=("action_items",), source="card", cost_usd=Decimal("0.01")),
    C("office.printer", peer="office", name="Office printer",
      description="Print documents on the office printer and report its status",
      tags=("printer", "print"), examples=("print the quarterly report",),
      capabilities=("print",), source="card", cost_usd=Decimal("0.01")),
]
INDEX = RouteIndex(CARDS, semantic=False)  # the same answers with or without the extra
REFUSE = None


def XFAIL(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=reason)


# (task as a person would type it, the label that should win or REFUSE)
TABLE = [
    ("check with my office for pending action items", "office/office.action_items"),
    ("Check with my Office Butler for any pending ACTION ITEMS!",
     "office/office.action_items"),
    ("hey could you please check with my office butler whether there are any pending "
     "action items for me today", "office/office.action_items"),
    pytest.param("show my todo list from work", "office/office.action_items",
                 marks=XFAIL("lexical stages alone: below the threshold")),
    ("what follow-ups are open?", "office/office.action_items"),
    ("ask my office about the budget", "office (peer)"),
    ("office butler: anything new?", "office (peer)"),
    ("print the report at the office", "office/office.printer"),
    ("is the printer out of paper", "office/office.printer"),
    ("turn off the kitchen lights", "home.lights"),
    ("dim the bedroom lamp", "home.lights"),
    ("Lights on in the living room please", "home.lights"),
    ("set heating to 20", "home.thermostat"),
    pytest.param("how warm is it in the living room", "home.thermostat",
                 marks=XFAIL("a near miss: lights' example says living room")),
    ("it's cold, what is the temperature inside?", "home.thermostat"),
    ("is the front door locked?", "home.locks"),
    ("lock up", "home.locks"),
    ("unlock the back door", "home.locks"),
    ("remember that the car is due for service in March", "notes.write"),
    ("note down the wifi password: hunter2", "notes.write"),
    pytest.param("search my notes for the wifi password", "notes.search",
                 marks=XFAIL("a near miss: notes.write's example has the wifi password")),
    ("what is on my calendar tomorrow", "calendar.agenda"),
    ("when is my next dentist appointment", "calendar.agenda"),
    ("any meetings this afternoon?", "calendar.agenda"),
    ("book a meeting with Anna on Monday", "calendar.add"),
    ("add an event to the calendar: school play friday", "calendar.add"),
    ("find the lease pdf", "files.find"),
    ("where are the tax documents on the drive", "files.find"),
    ("echo hello", "echo"),
    # Nothing offers these: refused, not guessed.
    pytest.param("what's the weather tomorrow", REFUSE,
                 marks=XFAIL("a false accept: tomorrow is only on the calendar")),
    ("tell me a joke", REFUSE),
    ("translate this to French", REFUSE),
    ("play some music", REFUSE),
    ("open the garage", REFUSE),
    # warmer ~ warm (n-grams) ranks it first; the old router refused it outright.
    pytest.param("make it warmer", "home.thermostat",
                 marks=XFAIL("lexical stages alone: just below the threshold")),
    ("", REFUSE),
    ("please, thank you", REFUSE),
]


@pytest.mark.parametrize(("text", "expected"), TABLE)
def test_phrasings_choose_the_skill_or_peer_a_person_means(text: str,
                                                           expected: str | None) -> None:
    ranking = INDEX.route(text)
    best = ranking.best
    assert (best.candidate.label if best else None) == expected, explain(ranking)


def test_the_table_is_large_enough() -> None:
    assert len(TABLE) >= 30


def test_words_fold_case_and_width_and_stem_endings() -> None:
    full_width = "\uff2f\uff46\uff46\uff49\uff43\uff45"
    assert words(f"{full_width} OFFICE offices") == ["offic", "offic", "offic"]
    assert words("lights lighting lighted") == ["light"] * 3
    assert words("schedules scheduled scheduling") == ["schedul"] * 3
    assert words("memory.search") == ["memory", "search"]
    assert words("could you please check the") == []


def test_naming_a_peer_is_a_bonus_for_its_candidates() -> None:
    ranking = INDEX.route("my office printer")
    top = ranking.ranked[0]
    assert top.candidate.label == "office/office.printer" and top.peer_named
    assert top.score >= 0.9  # naming an agent is choosing it (NAMED_CONFIDENCE)


def test_a_peer_in_the_chain_is_skipped() -> None:
    ranking = INDEX.route("pending action items", skip_peer=lambda p: p == "office")
    assert ranking.best is None
    assert all(s.candidate.peer != "office" for s in ranking.ranked)


def test_the_threshold_decides_between_choice_and_refusal() -> None:
    loose = INDEX.route("set heating to 20", threshold=0.05)
    assert loose.best is not None
    strict = INDEX.route("set heating to 20", threshold=loose.best.score + 0.0001)
    assert loose.best is not None and loose.best.candidate.label == "home.thermostat"
    assert strict.best is None and "home.thermostat" in strict.closest()


def test_explain_says_which_words_matched_which_fields() -> None:
    text = explain(INDEX.route("check with my office for pending action items"))
    assert "1. office/office.action_items" in text
    assert "'action' in name/tags/id/capabilities" in text
    assert "stages: lexical, ngrams (semantic: not installed or off" in text
    assert "lexical 0." in text and "ngrams 0." in text
    assert "names peer 'office'" in text
    assert text.endswith("chosen: office/office.action_items")


def test_explain_a_refusal_lists_the_closest_and_the_unknown_words() -> None:
    ranking = INDEX.route("what is the weather on the moon")
    text = explain(ranking)
    assert "chosen: none (no_capable_skill): no word of the task is on any card" in text
    text = explain(INDEX.route("dim the weather on the moon", threshold=0.9999))
    assert "words no candidate has: weather, moon" in text
    assert "chosen: none (no_capable_skill): confidence below the threshold; closest: " \
        "home.lights" in text


def test_ties_prefer_local_then_cheaper_and_a_skill_before_its_peer() -> None:
    twins = [C("b", peer="p", name="notes", source="card"),
             C("", peer="p", name="notes", description="notes", source="config"),
             C("z", name="notes"), C("a", name="notes", cost_usd=Decimal("1"))]
    labels = [s.candidate.label for s in RouteIndex(twins, semantic=False).route("notes").ranked]
    # Locality: the local skills first (the cheaper first), then the peer's skill, then
    # the peer as a whole (it wins only what names it and fits none of its skills).
    assert labels == ["z", "a", "p/b", "p (peer)"]


def test_an_index_is_reusable_and_route_is_deterministic() -> None:
    first = INDEX.route("turn off the kitchen lights")
    assert INDEX.route("turn off the kitchen lights") == first
    assert RouteIndex(CARDS, semantic=False).route("turn off the kitchen lights") == first


def test_only_the_start_of_a_long_text_is_read() -> None:
    ranking = INDEX.route("turn off the kitchen lights " + "blah " * 500_000)
    assert ranking.best is not None and ranking.best.candidate.label == "home.lights"
    assert len(ranking.text) == ROUTED_CHARS
    assert INDEX.route("blah " * 500_000 + "lights").ranked == ()


def test_ignored_words_are_not_read() -> None:
    # At office, "office" names the agent itself: it must not pull in office.printer.
    assert INDEX.route("ask my office about the budget", ignore={"offic"}).ranked == ()


def test_a_word_one_edit_from_a_card_word_meets_it() -> None:
    # "mnth" and "balnce" share too few character grams with "month" and "balance";
    # the same word once one letter is left out of either or both (the first letter
    # kept) still meets them.
    spelling = SpellingIndex(LexicalIndex(CARDS))
    assert spelling.alike("lampz") == (("lamp", EDIT_SIMILARITY),)  # one letter added
    assert all(w != "lamp" for w, _ in spelling.alike("lumpy"))  # two letters away
    assert spelling.alike("xamp") == ()  # the first letter must be the same
    ranking = RouteIndex(CARDS, semantic=False).route("unlok the frnt door")
    assert ranking.best is not None and ranking.best.candidate.label == "home.locks"
    assert any(m.card_word == "unlock" for m in ranking.best.matches)
