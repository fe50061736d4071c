"""What the intent router chooses between, and how much of each card it reads.

A candidate is a local skill (``peer`` empty), a peer as a whole (``skill_id`` empty) or
one skill of a peer's card. A card is the claim of whoever wrote it, so the router reads
only a bounded part of each field (``FIELD_LIMITS``): a card that stuffs fifty tags or
repeats its examples gets no more words in than an honest one (see lexical.py for how
the words that do get in count).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal

from butler.routing.words import words

# Per field: how many items (tags, examples, ...) are read and how many characters of each.
FIELD_LIMITS: dict[str, tuple[int, int]] = {
    "id": (1, 120), "name": (1, 120), "tags": (12, 40), "capabilities": (12, 60),
    "examples": (8, 200), "description": (1, 400),
}


@dataclass(frozen=True, slots=True)
class RouteCandidate:
    """A local skill (``peer`` empty), a peer as a whole (``skill_id`` empty) or one
    skill of a peer's card."""

    skill_id: str
    peer: str = ""
    name: str = ""
    description: str = ""
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    cost_usd: Decimal = Decimal("0")
    # local, config (a peer entry), card (a peer's card), registry:<the registry's URL>
    source: str = "local"

    @property
    def kind(self) -> str:
        return "local" if not self.peer else "peer-skill" if self.skill_id else "peer"

    @property
    def label(self) -> str:
        if not self.peer:
            return self.skill_id
        return f"{self.peer}/{self.skill_id}" if self.skill_id else f"{self.peer} (peer)"

    def fields(self) -> dict[str, tuple[str, ...]]:
        """The card's texts as the router reads them: at most ``FIELD_LIMITS`` per
        field, each distinct item once."""
        raw = {"id": (self.skill_id,), "name": (self.name,), "tags": self.tags,
               "capabilities": self.capabilities, "examples": self.examples,
               "description": (self.description,)}
        out: dict[str, tuple[str, ...]] = {}
        for name, items in raw.items():
            count, chars = FIELD_LIMITS[name]
            kept = dict.fromkeys(i[:chars].strip() for i in items if i and i.strip())
            out[name] = tuple(kept)[:count]
        return out

    def field_words(self, names: Collection[str] = ()) -> dict[str, tuple[str, ...]]:
        """Each field's distinct stemmed words. A skill of a peer's card does not carry
        its peer's name (``office.printer`` is ``printer``), and a peer as a whole not its
        card's name: a task that names the peer is counted once, by the router, for all of
        that peer's candidates alike. ``names``: the words of every peer's name, which no
        card may use (a card saying "office" cannot pass for the office)."""
        peer_words = {*names, *words(self.peer)}
        fields = self.fields()
        if self.kind == "peer":
            fields["name"] = ()  # the peer's address, not what it does
        return {name: tuple(w for w in dict.fromkeys(words(" ".join(texts)))
                            if w not in peer_words)
                for name, texts in fields.items()}

    def text(self) -> str:
        """The card in one text, for the semantic stage."""
        f = self.fields()
        return ". ".join(t for t in (*f["name"], *f["description"], ", ".join(f["tags"]),
                                     *f["examples"]) if t) or self.label
