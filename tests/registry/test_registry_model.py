from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from butler.registry.card import build_entry, validate_card
from butler.registry.model import NAME_PATTERN, AgentEntry, normalise_name
from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.model import RequestError
from tests.registry.registry_support import make_card

FULLWIDTH = "\uff4f\uff46\uff46\uff49\uff43\uff45"  # "office" in fullwidth letters


@pytest.mark.parametrize("raw", ["office", "Office", "OFFICE", FULLWIDTH, FULLWIDTH.title()])
def test_look_alikes_normalise_to_one_name(raw: str) -> None:
    assert normalise_name(raw) == "office"


@pytest.mark.parametrize("raw", [
    "", " ", "off ice", "office\x00", "office\n", "\x1b[31moffice", "off\u200bice",
    "off\u202eice", "\u043effice",  # CYRILLIC SMALL LETTER O, then "ffice"
    "-office", ".office", "a" * 65, "office/../x", FULLWIDTH + "\u0000", "\ud800",
])
def test_bad_names_are_refused(raw: str) -> None:
    with pytest.raises(RequestError) as info:
        normalise_name(raw)
    assert info.value.code == "invalid_request"


@given(st.text(max_size=80))
def test_any_name_normalises_to_the_pattern_or_is_refused(raw: str) -> None:
    try:
        name = normalise_name(raw)
    except RequestError:
        return
    assert NAME_PATTERN.fullmatch(name)
    assert normalise_name(name) == name


def test_butler_card_is_accepted_and_indexed() -> None:
    index = validate_card(make_card(caps=("Memory.Search", "echo")), max_bytes=65536)
    assert index.display_name == "Office"
    assert index.capabilities == ("echo", "memory.search")
    assert index.skills == ("search",)
    assert index.tags == ("memory", "search")
    assert "full-text search" in index.search_text


def test_a_skills_input_schema_and_bridge_fidelity_are_accepted() -> None:
    """Regression: the registry refused them as unknown fields, so self-registration of
    any Butler with a /v2/card of this version failed."""
    card = make_card()
    card["skills"] = [{"id": "count", "input_schema": {"type": "object"},
                       "bridge_fidelity": {"level": "adapted", "caveats": ["no input-required"]}}]
    assert validate_card(card, max_bytes=65536).skills == ("count",)


def test_standard_a2a_card_is_accepted() -> None:
    card = {
        "protocolVersion": "0.3.0", "name": "Weather", "description": "Forecasts",
        "url": "https://weather.example/a2a", "version": "1.0.0",
        "capabilities": {"streaming": True, "pushNotifications": False},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "provider": {"organization": "Example", "url": "https://example.com"},
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "skills": [{"id": "forecast", "name": "Forecast", "description": "Weather",
                    "tags": ["weather"], "inputModes": ["text/plain"]}],
    }
    index = validate_card(card, max_bytes=65536)
    assert index.capabilities == ()
    assert index.skills == ("forecast",)
    assert index.tags == ("weather",)


def test_numbers_are_stored_exactly() -> None:
    provider = '{"score": 1.10, "n": 3, "big": 1e999999999, "whole": 2.0}'
    card = exact_json.loads(json.dumps(make_card())[:-1] + f', "provider": {provider}}}')
    index = validate_card(card, max_bytes=65536)
    assert index.card["provider"] == {"score": "1.10", "n": 3, "big": "1E+999999999", "whole": 2}


BAD_CARDS: list[tuple[Any, str]] = [
    ([], "card"),
    ({}, "card.name"),
    ({"name": ""}, "card.name"),
    ({"name": 5}, "card.name"),
    ({"name": "x\x07"}, "card.name"),
    ({"name": "x", "evil": 1}, "card.evil"),
    ({"name": "x", "url": "ftp://host"}, "card.url"),
    ({"name": "x", "url": "http://user:pw@host"}, "card.url"),
    ({"name": "x", "url": "http://host:99999"}, "card.url"),
    ({"name": "x", "capabilities": "memory.search"}, "card.capabilities"),
    ({"name": "x", "capabilities": ["has space"]}, "card.capabilities[0]"),
    ({"name": "x", "capabilities": ["c"] * 65}, "card.capabilities"),
    ({"name": "x", "skills": [{"name": "no id"}]}, "card.skills[0].id"),
    ({"name": "x", "skills": [{"id": "a", "other": 1}]}, "card.skills[0].other"),
    ({"name": "x", "skills": [{"id": "a"}, {"id": "A"}]}, "card.skills"),
    ({"name": "x", "skills": [{"id": "a", "tags": [1]}]}, "card.skills[0].tags[0]"),
    ({"name": "x", "skills": [{"id": "a", "cost_usd": "-1"}]}, "card.skills[0].cost_usd"),
    ({"name": "x", "skills": [{"id": "a", "cost_usd": "abc"}]}, "card.skills[0].cost_usd"),
    ({"name": "x", "skills": [{"id": "a", "input_schema": {"type": "string"}}]},
     "card.skills[0].input_schema"),
    ({"name": "x", "skills": [{"id": "a", "bridge_fidelity": {"level": "perfect"}}]},
     "card.skills[0].bridge_fidelity.level"),
    ({"name": "x", "skills": [{"id": "a", "bridge_fidelity": {"level": "adapted",
                                                              "caveats": [3]}}]},
     "card.skills[0].bridge_fidelity.caveats[0]"),
    ({"name": "x", "streaming": "yes"}, "card.streaming"),
    ({"name": "x", "description": "a\x00b"}, "card.description"),
    ({"name": "x", "provider": {"o": "\ud800"}}, "card.provider.o"),
    ({"name": "x", "version": ["1"]}, "card.version"),
]


@pytest.mark.parametrize(("card", "path"), BAD_CARDS)
def test_bad_cards_name_the_field(card: Any, path: str) -> None:
    with pytest.raises(RequestError) as info:
        validate_card(card, max_bytes=65536)
    assert info.value.code == "invalid_request"
    assert info.value.message.startswith(path + ":")


def test_oversized_card_is_413() -> None:
    card = make_card(description="x" * 8000)
    with pytest.raises(RequestError) as info:
        validate_card(card, max_bytes=4096)
    assert info.value.code == "payload_too_large"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20)
    | st.decimals(allow_nan=True, allow_infinity=True, places=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(
    st.sampled_from(["name", "description", "url", "version", "capabilities", "skills",
                     "streaming", "provider", "agent_id", "auth_schemes"]),
    json_values, max_size=8,
))
def test_arbitrary_cards_are_accepted_or_refused_with_a_request_error(card: Any) -> None:
    try:
        index = validate_card(card, max_bytes=65536)
    except RequestError as exc:
        assert exc.status in (400, 413)
        return
    entry = build_entry("x", "alice", index, url="http://h", now=0.0, ttl_seconds=60)
    assert AgentEntry.from_record(entry.to_record()) == entry


def test_wire_round_trip() -> None:
    index = validate_card(make_card(), max_bytes=65536)
    entry = build_entry("office", "alice", index, url="http://h:1", now=1_700_000_000.5,
                        ttl_seconds=60)
    wire = exact_json.loads(exact_json.dumps(entry.to_json(now=1_700_000_010.5)))
    assert wire["expires_in_seconds"] == 50
    assert wire["expires_at"] == "2023-11-14T22:14:20.500Z"
    back = AgentEntry.from_json(wire)
    assert back.expires_at == entry.expires_at and back.card == entry.card
    assert isinstance(wire["expires_in_seconds"], int | Decimal)
