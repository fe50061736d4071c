"""Butler's router as the daemon runs it, over the evaluation's cards.

The one place the evaluation touches Butler's API: candidates are built as the daemon
builds them (``local_candidate`` for the instance's own skills, ``from_card`` for each
peer's entry and card: configured peers first, then the registry's agents that are not
configured peers, as ``PeerDelegator.route_candidates``), and each request is decided by
``IntentRouter.choose``, the daemon's call, with the instance's own id ("home") and a
chain of that id alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from butler.config.model import SkillConfig
from butler.delegation.peer_cards import from_card
from butler.delegation.peers import Candidate, DelegationPlan
from butler.routing import Ranking, RouteCandidate, RouteIndex
from butler.routing.words import words
from butler.skills.builtin import echo
from butler.skills.catalog import Skill, SkillCatalog
from butler.swarm.decision import IntentRouter, local_candidate
from intent.dataset import LOCAL_AGENT, AgentCards
from internal.protocol.a2a.model import Identity

_CANDIDATE_FIELDS = {f.name for f in dataclasses.fields(Candidate)}
_SKILL_FIELDS = {f.name for f in dataclasses.fields(SkillConfig)}
_TUPLES = ("tags", "examples", "capabilities")


def skill_config(entry: dict[str, Any]) -> SkillConfig:
    """A ``skills:`` entry of a config file, as far as routing reads it."""
    kept: dict[str, Any] = {k: (tuple(v) if k in _TUPLES else v) for k, v in entry.items()
            if k in _SKILL_FIELDS}
    return SkillConfig(**kept)


def peer_candidate(entry: dict[str, Any]) -> Candidate:
    """A peer entry (a config file's, or a registry record's when ``source`` says so)."""
    kept = {k: v for k, v in entry.items() if k in _CANDIDATE_FIELDS}
    kept["capabilities"] = tuple(kept.get("capabilities", ()))
    kept["cost_usd"] = Decimal(str(kept.get("cost_usd", "0")))
    return Candidate(token="", **kept)


def peer_routes(peers: Sequence[tuple[dict[str, Any], dict[str, Any]]]
                ) -> tuple[RouteCandidate, ...]:
    """Configured peers and their cards' skills, then registry agents not configured."""
    static = [(peer_candidate(e), c) for e, c in peers if e.get("source") != "registry"]
    configured = {p.name for p, _ in static}
    found = [(peer_candidate(e), c) for e, c in peers
             if e.get("source") == "registry" and e["name"] not in configured]
    return tuple(r for p, card in (*static, *found) for r in from_card(p, card))


def label(candidate: RouteCandidate) -> str:
    """``agent/skill``, or the peer's name for the peer as a whole."""
    if not candidate.peer:
        return f"{LOCAL_AGENT}/{candidate.skill_id}"
    return f"{candidate.peer}/{candidate.skill_id}" if candidate.skill_id else candidate.peer


class _Peers:
    """What IntentRouter asks of the delegator: the route candidates (never a plan here)."""

    def __init__(self, routes: tuple[RouteCandidate, ...]) -> None:
        self.routes = routes

    async def route_candidates(self) -> tuple[RouteCandidate, ...]:
        return self.routes

    async def plan(self, capabilities: Sequence[str], chain: Sequence[str],
                   peer: str | None = None, skill: str | None = None) -> DelegationPlan:
        raise AssertionError("the evaluation only routes")


class ButlerRouter:
    name = "Butler"

    def __init__(self, cards: AgentCards,
                 extra_peers: Sequence[tuple[dict[str, Any], dict[str, Any]]] = (),
                 padding: Sequence[RouteCandidate] = (), limit: int | None = None,
                 *, semantic: bool = True) -> None:
        """``extra_peers``: more (peer entry, card) pairs, a hostile card; ``padding``:
        synthetic peer candidates after the real ones and ``limit``: at most this many
        candidates in all (the timing at a given count)."""
        configs = [skill_config(s) for s in cards.local]
        catalog = SkillCatalog([Skill(c, echo) for c in configs], None)
        self._router = IntentRouter(catalog, agent_id=LOCAL_AGENT, semantic=semantic)
        routes = (*peer_routes([*cards.peers, *extra_peers]), *padding)
        if limit is not None:
            routes = routes[:max(limit - len(configs), 0)]
        self._peers = _Peers(routes)
        self.candidates = len(configs) + len(routes)
        self._caller = Identity("me")
        self._chain = (LOCAL_AGENT,)
        self._loop = asyncio.new_event_loop()

    def close(self) -> None:
        self._loop.close()

    def decide(self, text: str) -> tuple[str | None, list[str]]:
        """The chosen label (None: declined) and the top three of the ranking."""
        return self._loop.run_until_complete(self._decide(text))

    async def _decide(self, text: str) -> tuple[str | None, list[str]]:
        intent = await self._router.choose(self._caller, text, self._chain, self._peers)
        top = [label(s.candidate) for s in intent.ranking.ranked[:3]]
        if intent.skill is not None:
            return f"{LOCAL_AGENT}/{intent.skill.id}", top
        if intent.peer is not None:
            return label(intent.peer), top
        return None, top

    def rank(self, text: str) -> Ranking:
        """The daemon's ranking of ``text`` (what ``decide`` decides on)."""
        return self._loop.run_until_complete(
            self._router.rank(self._caller, text, self._chain, self._peers))

    @property
    def ignored(self) -> frozenset[str]:
        """The words the router does not read (the instance's own name)."""
        return frozenset(words(LOCAL_AGENT))

    def index(self) -> RouteIndex:
        """The router's index over these candidates (built on first use)."""
        return self._router.index(self._caller, self._peers.routes)

    def timed(self, texts: Sequence[str], rounds: int) -> list[tuple[float, float]]:
        """Seconds per decision, wall-clock and this thread's CPU, each of ``texts``
        decided ``rounds`` times (after one round to warm up: the index is built on the
        first)."""
        return self._loop.run_until_complete(self._timed(texts, rounds))

    async def _timed(self, texts: Sequence[str], rounds: int) -> list[tuple[float, float]]:
        choose, caller, chain, peers = (self._router.choose, self._caller, self._chain,
                                        self._peers)
        for text in texts:
            await choose(caller, text, chain, peers)
        out = []
        for _ in range(rounds):
            for text in texts:
                t0, c0 = time.perf_counter(), time.thread_time()
                await choose(caller, text, chain, peers)
                out.append((time.perf_counter() - t0, time.thread_time() - c0))
        return out


def all_routes(cards: AgentCards,
               extra_peers: Sequence[tuple[dict[str, Any], dict[str, Any]]] = ()
               ) -> list[RouteCandidate]:
    """Every candidate as Butler has them: the local skills, then the peers'."""
    local = [local_candidate(skill_config(s)) for s in cards.local]
    return [*local, *peer_routes([*cards.peers, *extra_peers])]


def text_of(c: RouteCandidate) -> str:
    """A candidate as one text, for the baselines: the words Butler's router reads."""
    ident = c.skill_id.replace("_", " ").replace(".", " ")
    return " ".join((ident, c.peer, c.name, c.description, " ".join(c.tags),
                     " ".join(c.examples), " ".join(c.capabilities)))
