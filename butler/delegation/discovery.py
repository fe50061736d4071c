"""Registry results as delegation candidates, cached briefly, filtered by the outbound
guard under the registry's rules (an entry is a claim, so its URL is judged before it
becomes a candidate, and again, through the same rules, when a delegation connects).

Three ways in: by capability (``/v1``), the whole listing for the intent router
(``/v1``), and, for a task in plain words, the registry's ARD search with its text
(``POST /search``), which also finds agents known only from crawled catalogs and
federated registries. A search waits at most ``SEARCH_SECONDS``; a registry that is
down or slow costs routing that once per ``cache_seconds`` and nothing more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal
from typing import Any, TypeVar

from yarl import URL

from butler.config.model import PeerConfig
from butler.delegation.peers import Candidate
from butler.registry.catalog_entry import A2A_CARD, publisher_of, serves_publisher
from butler.registry.client import RegistryClient
from butler.registry.model import AgentEntry
from butler.routing import RouteCandidate
from internal.http import OutboundGuard
from internal.protocol.a2a.codec.butler_v2 import parse_amount
from internal.protocol.a2a.model import OutboundRefused, agent_key

log = logging.getLogger("butler.delegation")


# Capability lists are the callers' choice: the cache keeps this many, the oldest go.
CACHE_ENTRIES = 256
# The intent router ranks at most this many registry agents (and their cards' skills).
ROUTABLE_AGENTS = 500
# A search in plain words: how long routing waits for the registry, how many results it
# reads, and how long (and how many) agents a search found stay candidates.
SEARCH_SECONDS = 1.0
SEARCH_RESULTS = 20
SEARCH_KEEP_SECONDS = 300.0
SEARCH_KEEP = 200
_CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")

Searched = tuple[tuple[Candidate, RouteCandidate], ...]

_T = TypeVar("_T")


class RegistryDiscovery:
    """A registry entry is a claim anyone with registry access can make, so a token goes
    only where the config sends it: ``peers`` entries by name (to the URL configured
    there, never one a registrant advertises under that name), and ``peer_token`` only
    to agents registered by an identity in ``trusted_registrants``."""

    def __init__(self, client: RegistryClient, *, self_name: str, peer_token: str,
                 static: Sequence[PeerConfig], guard: OutboundGuard,
                 cache_seconds: float, trusted_registrants: Sequence[str] = (),
                 trusted_publishers: Sequence[str] = ()) -> None:
        self._client = client
        self.source = f"registry:{client.base_url}"
        self._self = self_name
        self._peer_token = peer_token
        self._static = {agent_key(p.name): p for p in static}
        self._trusted = frozenset(agent_key(n) for n in trusted_registrants)
        self._publishers = frozenset(p.lower().rstrip(".") for p in trusted_publishers)
        self._guard = guard
        self._ttl = cache_seconds
        self._cache: dict[tuple[str, ...], tuple[float, list[Candidate]]] = {}
        self._routable: tuple[float, tuple[tuple[Candidate, dict[str, Any]], ...]] | None = None
        self._searches: dict[str, float] = {}  # a text -> when it was last searched
        # What searches found, by agent key: (when, candidate, route); and as one tuple,
        # the same while nothing changed (the router caches its index by its identity).
        self._found: dict[str, tuple[float, Candidate, RouteCandidate]] = {}
        self._searched: Searched = ()
        # One refresh per key at a time: tasks that miss the cache together share its answer
        # instead of each asking the registry and resolving every entry's name again.
        self._refreshing: dict[tuple[str, ...] | None, asyncio.Future[Any]] = {}

    async def __call__(self, capabilities: Sequence[str]) -> list[Candidate]:
        key = tuple(sorted(capabilities))
        hit = self._cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < self._ttl:
            return hit[1]
        return await self._once(key, lambda: self._find(key))

    async def _find(self, key: tuple[str, ...]) -> list[Candidate]:
        entries = await self._client.find(capability=key[0], max_results=200)
        found = [c for c in await self._candidates(entries, key) if c is not None]
        while len(self._cache) >= CACHE_ENTRIES:
            del self._cache[next(iter(self._cache))]
        self._cache[key] = (time.monotonic(), found)
        return found

    async def routable(self) -> tuple[tuple[Candidate, dict[str, Any]], ...]:
        """Every live agent a token may go to (by the rules above), with its card, for the
        intent router; the same tuple while it is cached, like a lookup by capability."""
        hit = self._routable
        if hit is not None and time.monotonic() - hit[0] < self._ttl:
            return hit[1]
        return await self._once(None, self._find_routable)

    async def _find_routable(self) -> tuple[tuple[Candidate, dict[str, Any]], ...]:
        hit = self._routable
        entries = await self._client.find(max_results=ROUTABLE_AGENTS)
        found = tuple((cand, entry.card if isinstance(entry.card, dict) else {})
                      for entry, cand in zip(entries, await self._candidates(entries, ()),
                                             strict=True) if cand is not None)
        # Unchanged, the same tuple: the router's index of it is not rebuilt.
        same = hit is not None and hit[1] == found
        self._routable = (time.monotonic(), hit[1] if hit is not None and same else found)
        return self._routable[1]

    async def search(self, text: str) -> Searched:
        """The agents the registry's ARD search finds for ``text`` (a task in plain
        words), with what a search found lately: never raises, never waits past
        ``SEARCH_SECONDS``."""
        key = " ".join(text.casefold().split())[:1000]
        at = self._searches.get(key)
        if key and (at is None or time.monotonic() - at >= self._ttl):
            self._searches.pop(key, None)
            while len(self._searches) >= CACHE_ENTRIES:
                del self._searches[next(iter(self._searches))]
            self._searches[key] = time.monotonic()  # a failure too: asked again after ttl
            try:
                async with asyncio.timeout(SEARCH_SECONDS):
                    await self._once(("search", key), lambda: self._find_text(key))
            except Exception as exc:
                log.warning("registry search failed, routing without it: %s",
                            getattr(exc, "message", None) or type(exc).__name__)
        return self.searched()

    def searched(self) -> Searched:
        now = time.monotonic()
        if any(now - at >= SEARCH_KEEP_SECONDS for at, _, _ in self._found.values()):
            self._found = {k: v for k, v in self._found.items()
                           if now - v[0] < SEARCH_KEEP_SECONDS}
        found = tuple((cand, route) for _, cand, route in self._found.values())
        if found != self._searched:
            self._searched = found
        return self._searched

    async def _find_text(self, text: str) -> None:
        answer = await self._client.search(text, page_size=SEARCH_RESULTS)
        results = [r for r in answer["results"][:SEARCH_RESULTS] if isinstance(r, dict)]
        for found in await asyncio.gather(*(self._from_result(r) for r in results)):
            if found is None:
                continue
            name = agent_key(found[0].name)
            self._found.pop(name, None)
            while len(self._found) >= SEARCH_KEEP:
                del self._found[next(iter(self._found))]
            self._found[name] = (time.monotonic(), *found)

    async def _from_result(self, item: dict[str, Any]
                           ) -> tuple[Candidate, RouteCandidate] | None:
        """An ARD result that is an A2A agent's card, as a peer as a whole. Its token is
        ``peer_token``, and only for a publisher in ``trusted_publishers`` (the registry
        checked the entry's URN against the domain it came from) at a URL on that
        publisher's domain; a configured peer's URL or name is left to the config."""
        url, identifier = item.get("url"), item.get("identifier")
        if item.get("type") != A2A_CARD or not isinstance(url, str) \
                or not isinstance(identifier, str):
            return None
        base = next((url[:-len(p)] for p in _CARD_PATHS if url.endswith(p)), None)
        name = identifier.rsplit(":", 1)[-1]
        if base is None or not 0 < len(name) <= 128 or agent_key(name) == agent_key(self._self):
            return None
        static = self._static.get(agent_key(name))
        if static is not None or any(p.url.rstrip("/") == base.rstrip("/")
                                     for p in self._static.values()):
            return None
        publisher = publisher_of(identifier)
        try:
            host = URL(base).raw_host or ""
        except ValueError:
            return None
        if publisher not in self._publishers or not self._peer_token or \
                not serves_publisher(host, publisher):
            log.info("not calling search result %s: its publisher is not in "
                     "configurations.registry.trusted_publishers", identifier[:200])
            return None
        try:
            await self._guard.check_url(base)
        except OutboundRefused as exc:
            log.warning("ignoring search result %s: %s", identifier[:200], exc.message)
            return None
        caps = tuple(c for c in item.get("capabilities", []) if isinstance(c, str))
        cand = Candidate(name=name, url=base.rstrip("/"), token=self._peer_token,
                         capabilities=caps, source=self.source, rules=self._guard.rules)
        route = RouteCandidate(
            "", peer=name, name=_text(item.get("displayName")),
            description=_text(item.get("description")), tags=_texts(item.get("tags")),
            examples=_texts(item.get("representativeQueries")), capabilities=caps,
            source=self.source)
        return cand, route

    async def _once(self, key: tuple[str, ...] | None,
                    refresh: Callable[[], Awaitable[_T]]) -> _T:
        running = self._refreshing.get(key)
        if running is None:
            running = asyncio.ensure_future(refresh())
            self._refreshing[key] = running
            running.add_done_callback(lambda done: self._done(key, done))
        # Shielded: one waiter's cancellation (its task's deadline) does not end the
        # refresh the others are waiting for.
        result: _T = await asyncio.shield(running)
        return result

    def _done(self, key: tuple[str, ...] | None, done: asyncio.Future[Any]) -> None:
        self._refreshing.pop(key, None)
        if not done.cancelled():
            done.exception()  # retrieved: its waiters, if any are left, have it raised

    async def _candidates(self, entries: Sequence[AgentEntry],
                          caps: tuple[str, ...]) -> list[Candidate | None]:
        # The names are resolved side by side: 500 entries one after another would hold a
        # task in plain words for as many DNS round trips.
        return list(await asyncio.gather(*(self._candidate(e, caps) for e in entries)))

    async def _candidate(self, entry: AgentEntry, caps: tuple[str, ...]) -> Candidate | None:
        if entry.name == self._self or not set(caps) <= set(entry.capabilities):
            return None
        static = self._static.get(agent_key(entry.name))
        if static is not None:
            if entry.url.rstrip("/") != static.url.rstrip("/"):
                log.warning("ignoring registry entry %s (registered by %s): its URL is not the "
                            "one configured for peer %s, so its token is not sent there",
                            entry.name, entry.owner, static.name)
                return None
            token = static.token
        elif agent_key(entry.owner) in self._trusted:
            token = self._peer_token
        else:
            log.info("not calling registry entry %s: registered by %s, who is not in "
                     "configurations.registry.trusted_registrants", entry.name, entry.owner)
            return None
        if not token:
            return None
        try:
            await self._guard.check_url(entry.url)
        except OutboundRefused as exc:
            log.warning("ignoring registry entry %s: %s", entry.name, exc.message)
            return None
        return Candidate(
            name=entry.name, url=entry.url.rstrip("/"), token=token,
            capabilities=entry.capabilities, cost_usd=_price(entry.card, caps),
            spend_cap_usd=static.spend_cap_usd if static else None,
            timeout=static.timeout_seconds if static else 60.0, source=self.source,
            ca_file=static.ca_file if static else None, rules=self._guard.rules,
            identity_key=_identity_key(entry.card),
        )


def _text(value: Any) -> str:
    return value[:2000] if isinstance(value, str) else ""


def _texts(value: Any) -> tuple[str, ...]:
    return tuple(_text(v) for v in value[:50] if isinstance(v, str)) \
        if isinstance(value, list) else ()


def _identity_key(card: Any) -> dict[str, Any] | None:
    """The key the registry holds with the name (it refused changes the old key did not
    sign: butler/registry/keys.py)."""
    key = card.get("identity_key") if isinstance(card, dict) else None
    return key if isinstance(key, dict) else None


def _price(card: Any, caps: tuple[str, ...]) -> Decimal:
    """The cheapest advertised skill that provides every capability (0 if none says)."""
    prices = []
    for skill in card.get("skills", []) if isinstance(card, dict) else []:
        if not isinstance(skill, dict) or not set(caps) <= set(skill.get("capabilities") or []):
            continue
        price = parse_amount(skill.get("cost_usd", "0"))
        if price is not None and price >= 0:
            prices.append(price)
    return min(prices, default=Decimal("0"))
