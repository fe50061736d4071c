"""What the intent router takes from peers' cards: a card is the peer's claim, read
leniently and bounded; a peer whose card cannot be read is routed by its config entry."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from butler.delegation.peer_cards import MAX_CARD_SKILLS, PeerCards, from_card
from butler.delegation.peers import Candidate
from internal.protocol.a2a.model import DelegationFailed

OFFICE = Candidate("office", "http://127.0.0.1:9", "t", ("memory.search",),
                   cost_usd=Decimal("0.01"))
DOWN = Candidate("lab", "http://127.0.0.1:10", "t", ("lab.work",))


def test_a_card_is_read_leniently_and_bounded() -> None:
    card: dict[str, Any] = {"name": "Office Butler", "description": 7, "skills": [
        {"id": "office.notes", "name": "Notes", "tags": ["notes", 3, None],
         "examples": "not a list", "capabilities": ["notes"], "cost_usd": "0.05"},
        {"id": "cheap", "cost_usd": "-1"}, {"id": "nan", "cost_usd": "NaN"},
        {"name": "no id"}, "not a skill",
        *({"id": f"s{i}"} for i in range(MAX_CARD_SKILLS + 50))]}
    routes = from_card(OFFICE, card)
    whole, notes, cheap, nan = routes[:4]
    assert (whole.label, whole.name, whole.description, whole.source) == (
        "office (peer)", "Office Butler", "", "config")
    assert whole.capabilities == ("memory.search",)
    assert (notes.label, notes.tags, notes.examples, notes.source) == (
        "office/office.notes", ("notes",), (), "card")
    assert notes.cost_usd == Decimal("0.05")  # the dearer of the entry and the skill
    assert cheap.cost_usd == nan.cost_usd == Decimal("0.01")  # never below the entry's
    assert len(routes) <= 1 + MAX_CARD_SKILLS


async def test_a_peer_whose_card_cannot_be_read_is_routed_by_its_entry() -> None:
    calls: list[str] = []

    async def fetch(peer: Candidate) -> dict[str, Any]:
        calls.append(peer.name)
        if peer is DOWN:
            raise DelegationFailed("peer_unreachable", "connection refused")
        return {"skills": [{"id": "office.notes", "tags": ["notes"]}]}

    cards = PeerCards([OFFICE, DOWN], fetch)
    first = await cards.candidates()
    assert [c.label for c in first] == ["office (peer)", "office/office.notes", "lab (peer)"]
    assert await cards.candidates() is first  # kept: the router's index stays cached
    assert calls == ["office", "lab"]
