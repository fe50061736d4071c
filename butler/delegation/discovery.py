"""Registry results as delegation candidates, cached briefly, filtered by the outbound
guard under the registry's rules (an entry is a claim, so its URL is judged before it
becomes a candidate, and again, through the same rules, when a delegation connects)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal
from typing import Any, TypeVar

from butler.config.model import PeerConfig
from butler.delegation.peers import Candidate
from butler.registry.client import RegistryClient
from butler.registry.model import AgentEntry
from internal.http import OutboundGuard
from internal.protocol.a2a.codec.butler_v2 import parse_amount
from internal.protocol.a2a.model import OutboundRefused, agent_key

log = logging.getLogger("butler.delegation")


# Capability lists are the callers' choice: the cache keeps this many, the oldest go.
CACHE_ENTRIES = 256
# The intent router ranks at most this many registry agents (and their cards' skills).
ROUTABLE_AGENTS = 500

_T = TypeVar("_T")


class RegistryDiscovery:
    """A registry entry is a claim anyone with registry access can make, so a token goes
    only where the config sends it: ``peers`` entries by name (to the URL configured
    there, never one a registrant advertises under that name), and ``peer_token`` only
    to agents registered by an identity in ``trusted_registrants``."""

    def __init__(self, client: RegistryClient, *, self_name: str, peer_token: str,
                 static: Sequence[PeerConfig], guard: OutboundGuard,
                 cache_seconds: float, trusted_registrants: Sequence[str] = ()) -> None:
        self._client = client
        self._self = self_name
        self._peer_token = peer_token
        self._static = {agent_key(p.name): p for p in static}
        self._trusted = frozenset(agent_key(n) for n in trusted_registrants)
        self._guard = guard
        self._ttl = cache_seconds
        self._cache: dict[tuple[str, ...], tuple[float, list[Candidate]]] = {}
        self._routable: tuple[float, tuple[tuple[Candidate, dict[str, Any]], ...]] | None = None
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
            timeout=static.timeout_seconds if static else 60.0, source="registry",
            ca_file=static.ca_file if static else None, rules=self._guard.rules,
            identity_key=_identity_key(entry.card),
        )


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
