"""Delegation candidates: static peers from config and peers found in a registry, ranked."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from butler.config.model import PeerConfig
from butler.routing import RouteCandidate
from internal.http import CONFIGURED, OutboundRules
from internal.protocol.a2a.model import agent_key


@dataclass(frozen=True)
class Candidate:
    name: str
    url: str
    token: str
    capabilities: tuple[str, ...]
    cost_usd: Decimal = Decimal("0")
    spend_cap_usd: Decimal | None = None
    connect_timeout: float = 3.0
    timeout: float = 60.0
    max_response_bytes: int = 4 * 1024 * 1024
    source: str = "static"
    ca_file: Path | None = None
    protocol: str = "butler"
    # What the outbound guard lets this peer's URL reach: an operator's config may name a
    # peer on this host or the LAN; a registry entry gets the registry's rules.
    rules: OutboundRules = CONFIGURED
    # The identity key (a JWK) the registry holds for it; a config peer's is pinned on
    # first contact (``peer_identity``).
    identity_key: dict[str, Any] | None = field(default=None, compare=False, hash=False)

    def __repr__(self) -> str:  # never show the token
        return f"Candidate({self.name!r}, {self.url!r}, source={self.source!r})"

    def provides(self, capabilities: Sequence[str]) -> bool:
        return set(capabilities) <= set(self.capabilities)


@dataclass(frozen=True, slots=True)
class DelegationPlan:
    """Where one delegation goes, chosen once (``PeerDelegator.plan``) and carried to the
    send: the peers that can take it, best first, and what is asked of them."""

    targets: tuple[Candidate, ...]
    capabilities: tuple[str, ...] = ()
    peer: str | None = None  # asked by name (the intent router's choice)
    skill: str | None = None  # the peer's skill, from its card

    @property
    def price_usd(self) -> Decimal | None:
        """What the cheapest target charges; None when no peer can take it."""
        return min((c.cost_usd for c in self.targets), default=None)


def from_config(peers: Iterable[PeerConfig]) -> list[Candidate]:
    return [
        Candidate(name=p.name, url=p.url, token=p.token, capabilities=p.capabilities,
                  cost_usd=p.cost_usd, spend_cap_usd=p.spend_cap_usd,
                  connect_timeout=p.connect_timeout_seconds, timeout=p.timeout_seconds,
                  max_response_bytes=p.max_response_bytes, ca_file=p.ca_file,
                  protocol=p.protocol)
        for p in peers
    ]


class Discovery(Protocol):
    """Peers found in a registry (``RegistryDiscovery``)."""

    async def __call__(self, capabilities: Sequence[str]) -> list[Candidate]:
        """Agents providing every one of ``capabilities``."""

    async def routable(self) -> tuple[tuple[Candidate, dict[str, Any]], ...]:
        """Every agent a token may go to, with its card (for the intent router)."""

    async def search(self, text: str) -> tuple[tuple[Candidate, RouteCandidate], ...]:
        """The agents a search for ``text`` found, with those found lately."""

    def searched(self) -> tuple[tuple[Candidate, RouteCandidate], ...]:
        """The agents searches found lately."""


@dataclass(frozen=True)
class PeerStatus:
    """A peer as the operator sees it: ``health`` is ``unknown`` until it is first called,
    then ``ok`` or ``failing`` (its last call failed); ``latency_seconds`` a moving average."""

    name: str
    url: str
    source: str
    capabilities: tuple[str, ...]
    health: str
    failures: int
    latency_seconds: float | None


class PeerHealth:
    """Consecutive failures and a moving average of latency, per peer name."""

    def __init__(self) -> None:
        self._failures: dict[str, int] = {}
        self._latency: dict[str, float] = {}
        self._last_failure: dict[str, float] = {}

    def ok(self, name: str, seconds: float) -> None:
        self._failures[name] = 0
        prev = self._latency.get(name)
        self._latency[name] = seconds if prev is None else 0.8 * prev + 0.2 * seconds

    def failed(self, name: str) -> None:
        self._failures[name] = self._failures.get(name, 0) + 1
        self._last_failure[name] = time.monotonic()

    def status(self, cand: Candidate) -> PeerStatus:
        failures = self._failures.get(cand.name)
        health = "unknown" if failures is None else "failing" if failures else "ok"
        return PeerStatus(cand.name, cand.url, cand.source, cand.capabilities, health,
                          failures or 0, self._latency.get(cand.name))

    def rank_key(self, cand: Candidate) -> tuple[int, Decimal, float]:
        """Healthy first, then cheaper, then faster. A failing peer is retried after 30s."""
        failing = self._failures.get(cand.name, 0) > 0 and (
            time.monotonic() - self._last_failure.get(cand.name, 0.0) < 30.0)
        return (int(failing), cand.cost_usd, self._latency.get(cand.name, 0.0))


def eligible(candidates: Iterable[Candidate], capabilities: Sequence[str],
             chain: Sequence[str], peer: str | None) -> list[Candidate]:
    """Candidates for this work: never one already in the chain (that would loop)."""
    seen: set[str] = set()
    in_chain = {agent_key(hop) for hop in chain}
    out = []
    for cand in candidates:
        if agent_key(cand.name) in in_chain or cand.name in seen:
            continue
        if peer is not None and peer not in (cand.name, cand.url):
            continue
        if peer is None and not cand.provides(capabilities):
            continue
        seen.add(cand.name)
        out.append(cand)
    return out
