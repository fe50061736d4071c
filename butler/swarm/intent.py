"""The plan for a task that names neither a skill nor capabilities: the intent router
(``butler.routing``) over what the caller may see here and the peers this instance knows.

The candidates' words are indexed once per caller tier and set of peer cards, not per
task. Peers already in the chain are never candidates (that would loop back).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from butler.config.model import SkillConfig
from butler.routing import DEFAULT_THRESHOLD, Ranking, RouteCandidate, RouteIndex
from butler.routing.words import words
from butler.skills.catalog import Skill, SkillCatalog
from internal.protocol.a2a.model import Identity, agent_key


class PeerRoutes(Protocol):
    async def route_candidates(self) -> tuple[RouteCandidate, ...]:
        """The known peers as a whole and their cards' skills (the same tuple while
        nothing changed: indexes are cached by its identity)."""


@dataclass(frozen=True, slots=True)
class Intent:
    ranking: Ranking
    skill: Skill | None = None  # a local skill runs it
    peer: RouteCandidate | None = None  # or it is delegated to this peer


def local_candidate(cfg: SkillConfig) -> RouteCandidate:
    return RouteCandidate(cfg.id, name=cfg.name, description=cfg.description, tags=cfg.tags,
                          examples=cfg.examples, capabilities=cfg.capabilities,
                          cost_usd=cfg.cost_usd)


class IntentRouter:
    def __init__(self, catalog: SkillCatalog, threshold: float = DEFAULT_THRESHOLD,
                 agent_id: str = "") -> None:
        self.catalog = catalog
        self.threshold = threshold
        # "ask my office about the budget", arriving at office: "office" is the address,
        # not what is asked for, so the words of this agent's own id are not read.
        self._own = frozenset(words(agent_id))
        # Per tier: the peer routes and catalog generation an index was built from.
        self._indexes: dict[str | None,
                            tuple[tuple[RouteCandidate, ...], int, RouteIndex]] = {}

    async def candidates(self, peers: PeerRoutes | None) -> tuple[RouteCandidate, ...]:
        return await peers.route_candidates() if peers is not None else ()

    def index(self, caller: Identity | None, peer_routes: tuple[RouteCandidate, ...]
              ) -> RouteIndex:
        """The index of what ``caller`` may see here plus ``peer_routes``; built once per
        tier (visibility depends on it alone), set of peer cards and set of local skills
        (an MCP server's tools come and go with it)."""
        tier = None if caller is None else caller.tier
        generation = self.catalog.generation
        cached = self._indexes.get(tier)
        if cached is not None and cached[0] is peer_routes and cached[1] == generation:
            return cached[2]
        local = [local_candidate(s.config) for s in self.catalog.visible(caller)]
        index = RouteIndex([*local, *peer_routes])
        self._indexes[tier] = (peer_routes, generation, index)
        return index

    async def rank(self, caller: Identity | None, text: str, chain: Sequence[str],
                   peers: PeerRoutes | None,
                   allow: Callable[[RouteCandidate], bool] | None = None) -> Ranking:
        """``chain``: the agents the task has passed through, this one included;
        ``allow``: the candidates the caller's grants leave it (``grants.routable``)."""
        index = self.index(caller, await self.candidates(peers))
        passed = {agent_key(a) for a in chain}
        return index.route(text, self.threshold, skip_peer=lambda p: agent_key(p) in passed,
                           allow=allow, ignore=self._own)

    async def choose(self, caller: Identity, text: str, chain: Sequence[str],
                     peers: PeerRoutes | None,
                     allow: Callable[[RouteCandidate], bool] | None = None) -> Intent:
        visible = self.catalog.visible(caller)
        if len(visible) == 1 and not await self.candidates(peers):
            # Nothing to choose between (one skill, no peers): it does the task, as before
            # the router, whatever a ranking would say; so none is made, as its answer is
            # known.
            return Intent(Ranking(text, self.threshold, ()), skill=visible[0])
        ranking = await self.rank(caller, text, chain, peers, allow)
        best = ranking.best
        if best is not None and not best.candidate.peer:
            return Intent(ranking, skill=self.catalog.find(best.candidate.skill_id))
        if best is not None:
            return Intent(ranking, peer=best.candidate)
        if visible and not words(ranking.text):
            # Nothing to route by (no text, only data parts, or only words like "hello"):
            # the first skill the caller may see does it, as before the router.
            return Intent(ranking, skill=visible[0])
        return Intent(ranking)
