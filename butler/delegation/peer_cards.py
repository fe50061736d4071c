"""What the intent router knows of the configured peers: each peer as a whole (its name
and the capabilities its entry declares) and each skill its agent card shows us.

Cards are fetched with the peer's own token (so they list what this instance may call),
all peers at once, and kept for ``CARD_TTL_SECONDS``; a peer whose card cannot be read is
routed by its config entry alone until the next try, ``CARD_RETRY_SECONDS`` later.
Nothing here runs before a task in plain words asks for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal
from typing import Any

from butler.delegation.peers import Candidate
from butler.routing import RouteCandidate
from internal.protocol.a2a.codec.butler_v2 import parse_amount

log = logging.getLogger("butler.delegation")

CARD_TTL_SECONDS = 300.0
# A peer that was down when asked is asked again sooner (it may just be starting).
CARD_RETRY_SECONDS = 30.0
CARD_TIMEOUT_SECONDS = 3.0
MAX_CARD_SKILLS = 200  # a card is the peer's claim: bounded like anything else it sends
_TEXT = 2000

CardFetch = Callable[[Candidate], Awaitable[dict[str, Any]]]


class PeerCards:
    def __init__(self, peers: Sequence[Candidate], fetch: CardFetch) -> None:
        self._peers = tuple(peers)
        self._fetch = fetch
        self._lock = asyncio.Lock()
        self._at = -CARD_TTL_SECONDS
        self._ttl = CARD_TTL_SECONDS
        # The same tuple while it is fresh: callers cache what they build from it by identity.
        self._known: tuple[RouteCandidate, ...] = ()

    async def candidates(self) -> tuple[RouteCandidate, ...]:
        if not self._peers:
            return ()
        if time.monotonic() - self._at < self._ttl:
            return self._known
        async with self._lock:
            if time.monotonic() - self._at >= self._ttl:
                cards = await asyncio.gather(*(self._card(p) for p in self._peers))
                known = tuple(c for peer, card in zip(self._peers, cards, strict=True)
                              for c in from_card(peer, card))
                # Unchanged, the same tuple: the router's index of it is not rebuilt.
                if known != self._known:
                    self._known = known
                self._at = time.monotonic()
                self._ttl = CARD_TTL_SECONDS if all(cards) else CARD_RETRY_SECONDS
        return self._known

    async def _card(self, peer: Candidate) -> dict[str, Any]:
        try:
            async with asyncio.timeout(min(CARD_TIMEOUT_SECONDS, peer.timeout)):
                return await self._fetch(peer)
        except Exception as exc:  # a card is a hint: routing goes on with the config entry
            log.warning("could not read the card of peer %s for routing: %s", peer.name,
                        getattr(exc, "message", None) or type(exc).__name__)
            return {}


def from_card(peer: Candidate, card: dict[str, Any]) -> list[RouteCandidate]:
    """The peer as a whole, then each skill of its card (Butler's card or an A2A card).
    A peer found in a registry says so (``registry:<its URL>``) as the source of both."""
    found = peer.source.startswith("registry")
    out = [RouteCandidate(
        "", peer=peer.name, name=_text(card.get("name")) or peer.name,
        description=_text(card.get("description")), capabilities=peer.capabilities,
        cost_usd=peer.cost_usd, source=peer.source if found else "config")]
    skills = card.get("skills")
    for skill in skills[:MAX_CARD_SKILLS] if isinstance(skills, list) else ():
        if not isinstance(skill, dict) or not _text(skill.get("id")):
            continue
        out.append(RouteCandidate(
            _text(skill.get("id")), peer=peer.name, name=_text(skill.get("name")),
            description=_text(skill.get("description")), tags=_texts(skill.get("tags")),
            examples=_texts(skill.get("examples")),
            capabilities=_texts(skill.get("capabilities")),
            cost_usd=max(peer.cost_usd, _price(skill.get("cost_usd"))),
            source=peer.source if found else "card"))
    return out


def _text(value: Any) -> str:
    return value[:_TEXT] if isinstance(value, str) else ""


def _texts(value: Any) -> tuple[str, ...]:
    items = value[:50] if isinstance(value, list) else ()
    return tuple(_text(v) for v in items if isinstance(v, str))


def _price(value: Any) -> Decimal:
    price = parse_amount(value)
    return price if price is not None and price >= 0 else Decimal("0")
