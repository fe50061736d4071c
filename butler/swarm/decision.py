"""The swarm decision: one call, before any task runs or any peer is called.

Admission (a forged caller, a loop, the depth, the budget, the caller's grants: its
token's ``limits.skills`` and ``limits.capabilities``), then the plan: a local skill, or
a delegation by capability to the peers that can take it, or, for a task in plain words,
what the intent router chose (``IntentRouter``: the candidates' words indexed once per
caller tier and set of peer cards; never a peer already in the chain); or no plan (the
task is created and ends ``failed`` saying why). A refusal is raised as ``Refusal`` or
``AuthError`` and nothing is created. Last, the caller's spend caps reserve its share
(``SpendBook.reserve``).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import lru_cache
from typing import Protocol

from butler.config.model import CallerLimits, SkillConfig
from butler.delegation.peers import DelegationPlan
from butler.routing import DEFAULT_THRESHOLD, Ranking, RouteCandidate, RouteIndex
from butler.routing.router import SHOWN
from butler.routing.words import words
from butler.skills.catalog import Skill, SkillCatalog
from butler.swarm.spend import SpendBook
from internal.protocol.a2a.model import (
    AuthError,
    Envelope,
    Identity,
    Refusal,
    RequestError,
    Task,
    TaskRequest,
    agent_key,
    media_type_matches,
)

log = logging.getLogger("butler.swarm")

# The skill a delegated task runs as: what ``limits.skills`` must list to allow delegating.
DELEGATE_SKILL = "a2a.delegate"


@dataclass(frozen=True, slots=True)
class Admitted:
    """The envelope after admission: the chain this task carries and its budget."""

    chain: tuple[str, ...]
    budget_usd: Decimal
    may_delegate: bool  # the next hop (chain + us) is within max_depth
    # The caller's delegation tree, or a new one when this task begins it (a random,
    # unguessable id). The tree's workspace here is keyed by it and the caller.
    tree_id: str = ""

    @property
    def depth(self) -> int:
        return len(self.chain)


@dataclass(frozen=True, slots=True)
class SwarmPolicy:
    agent_id: str
    max_depth: int
    budget_cap_usd: Decimal
    # The score a task in plain words must reach for the intent router to choose (0..1).
    routing_threshold: float = DEFAULT_THRESHOLD
    routing_semantic: bool = True  # the router's semantic stage, where installed
    # The planner (config ``planner.when``/``shortlist``): "unsure" hands a task in plain
    # words the router declines or finds a close call to the planner skill.
    planner_when: str = "never"
    planner_shortlist: int = 8

    def admit(self, envelope: Envelope, caller: Identity) -> Admitted:
        chain = envelope.chain
        if caller.bound:
            if not chain:
                # A bound peer is the caller even when it sent no chain.
                chain = (caller.name,)
            elif agent_key(chain[-1]) != agent_key(caller.name):
                raise AuthError(
                    "chain_mismatch",
                    f"token belongs to {caller.name!r} but the chain names {chain[-1]!r} "
                    "as the caller",
                )
        if agent_key(self.agent_id) in {agent_key(hop) for hop in chain}:
            raise Refusal(
                "loop_detected",
                f"{self.agent_id} is already in the caller chain {' -> '.join(chain)}",
                details={"caller_chain": list(chain)},
            )
        if len(chain) > self.max_depth:
            raise Refusal(
                "depth_exceeded",
                f"chain depth {len(chain)} exceeds max_depth {self.max_depth}",
                details={"depth": len(chain), "max_depth": self.max_depth},
            )
        claimed = envelope.budget_usd
        budget = self.budget_cap_usd if claimed is None else min(claimed, self.budget_cap_usd)
        return Admitted(chain=chain, budget_usd=budget, may_delegate=self.can_delegate(chain),
                        tree_id=envelope.tree_id or secrets.token_hex(16))

    def can_delegate(self, chain: tuple[str, ...]) -> bool:
        """Whether the next hop (chain + us) is within depth: we never send a doomed hop."""
        return len(chain) + 1 <= self.max_depth


def require_affordable(cost: Decimal, budget: Decimal, what: str) -> None:
    if cost > budget:
        raise Refusal(
            "budget_exhausted",
            f"{what} costs {cost} USD but only {budget} USD is left",
            details={"cost_usd": str(cost), "budget_left_usd": str(budget)},
        )


def require_capabilities(caller: str, limits: CallerLimits | None,
                         asked: Sequence[str]) -> None:
    if limits is None or limits.capabilities is None:
        return
    missing = [c for c in asked if c not in limits.capabilities]
    if missing:
        raise AuthError("forbidden", f"{caller} is not granted capability "
                        f"{', '.join(missing)} (its token's limits.capabilities)",
                        details={"not_granted": missing})


def require_skill(caller: str, limits: CallerLimits | None, skill_id: str | None) -> None:
    """``skill_id``: what would run (``a2a.delegate`` for a delegation), or the skill the
    request names."""
    if limits is None or limits.skills is None or skill_id is None:
        return
    if skill_id not in limits.skills:
        raise AuthError("forbidden", f"{caller} is not granted skill {skill_id!r} "
                        "(its token's limits.skills)", details={"not_granted": [skill_id]})


def routable(limits: CallerLimits | None, delegate_skill: str
             ) -> Callable[[RouteCandidate], bool] | None:
    """Which of the intent router's candidates this caller's grants leave it (None: all),
    so that words never reach what asking by name or capability could not: a local skill
    in ``limits.skills`` with a capability in ``limits.capabilities``; a peer only with
    ``delegate_skill`` granted, and with capabilities limited only a skill of its card
    providing a granted one (a peer as a whole would choose for itself)."""
    if limits is None or (limits.skills is None and limits.capabilities is None):
        return None
    skills = None if limits.skills is None else frozenset(limits.skills)
    caps = None if limits.capabilities is None else frozenset(limits.capabilities)

    def allowed(cand: RouteCandidate) -> bool:
        runs = delegate_skill if cand.peer else cand.skill_id
        if skills is not None and runs not in skills:
            return False
        if caps is not None:
            return bool(cand.skill_id) and not caps.isdisjoint(cand.capabilities)
        return True
    return allowed


class Peers(Protocol):
    async def plan(self, capabilities: Sequence[str], chain: Sequence[str],
                   peer: str | None = None, skill: str | None = None) -> DelegationPlan:
        """Where a delegation of this would go (``PeerDelegator.plan``)."""

    async def route_candidates(self, text: str = "") -> tuple[RouteCandidate, ...]:
        """The known peers and their cards' skills, and what the registry's search finds
        for ``text``, for the intent router (the same tuple while nothing changed: its
        indexes are cached by the tuple's identity)."""


@dataclass(frozen=True, slots=True)
class Intent:
    ranking: Ranking
    skill: Skill | None = None  # a local skill runs it
    peer: RouteCandidate | None = None  # or it is delegated to this peer


def local_candidate(cfg: SkillConfig) -> RouteCandidate:
    return RouteCandidate(cfg.id, name=cfg.name, description=cfg.description, tags=cfg.tags,
                          examples=cfg.examples, capabilities=cfg.capabilities,
                          cost_usd=cfg.cost_usd)


# Every task asks it of every peer: the same few names, made a key once each.
_peer_key = lru_cache(maxsize=4096)(agent_key)


class IntentRouter:
    def __init__(self, catalog: SkillCatalog, threshold: float = DEFAULT_THRESHOLD,
                 agent_id: str = "", *, semantic: bool = True) -> None:
        self.catalog = catalog
        self.threshold = threshold
        self.semantic = semantic
        # "ask my office about the budget", arriving at office: "office" is the address,
        # not what is asked for, so the words of this agent's own id are not read.
        self._own = frozenset(words(agent_id))
        # Per tier: the peer routes and catalog generation an index was built from.
        self._indexes: dict[str | None,
                            tuple[tuple[RouteCandidate, ...], int, RouteIndex]] = {}

    async def candidates(self, peers: Peers | None, text: str = ""
                         ) -> tuple[RouteCandidate, ...]:
        return await peers.route_candidates(text) if peers is not None else ()

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
        index = RouteIndex([*local, *peer_routes], semantic=self.semantic)
        self._indexes[tier] = (peer_routes, generation, index)
        return index

    async def rank(self, caller: Identity | None, text: str, chain: Sequence[str],
                   peers: Peers | None,
                   allow: Callable[[RouteCandidate], bool] | None = None,
                   shown: int = SHOWN) -> Ranking:
        """``chain``: the agents the task has passed through, this one included;
        ``allow``: the candidates the caller's grants leave it (``routable``)."""
        index = self.index(caller, await self.candidates(peers, text))
        passed = {agent_key(a) for a in chain}
        return index.route(text, self.threshold, skip_peer=lambda p: _peer_key(p) in passed,
                           allow=allow, ignore=self._own, shown=shown)

    async def choose(self, caller: Identity, text: str, chain: Sequence[str],
                     peers: Peers | None,
                     allow: Callable[[RouteCandidate], bool] | None = None) -> Intent:
        visible = self.catalog.visible(caller)
        if len(visible) == 1 and not await self.candidates(peers, text):
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
        if visible and not ranking.text.strip():
            # No text at all (only data parts): words cannot say where it goes, so the
            # first skill the caller may see does it, as before the router. A text of
            # words like "hello" is declined instead (ranking.reason says why).
            return Intent(ranking, skill=visible[0])
        return Intent(ranking)


@dataclass(frozen=True, slots=True)
class RunSkill:
    skill: Skill


@dataclass(frozen=True, slots=True)
class Delegate:
    """No local skill fits; peers provide the task's capabilities within the budget, or
    the intent router chose a peer (and, from its card, its skill). ``delegation`` is
    carried to the run, which sends to its targets without choosing again."""

    delegation: DelegationPlan
    price_usd: Decimal


@dataclass(frozen=True, slots=True)
class NoPlan:
    """Nothing here or among the peers can do it: the task ends failed with this."""

    code: str
    message: str


Plan = RunSkill | Delegate | NoPlan


@dataclass(frozen=True, slots=True)
class Decision:
    admitted: Admitted
    plan: Plan


def require_accepted(skill: Skill, request: TaskRequest) -> None:
    """Every part's media type is one the skill's ``input_modes`` accept (A2A 3.1.1)."""
    offered = [p.media_type for p in request.parts]
    if request.text:
        offered.append("text/plain")
    if request.input:
        offered.append("application/json")
    modes = skill.config.input_modes
    for media in offered:
        if not any(media_type_matches(media, mode) for mode in modes):
            raise RequestError("content_type_not_supported",
                               f"skill {skill.id!r} takes {', '.join(modes)}, not {media}",
                               details={"media_type": media, "accepted": list(modes)})


@dataclass(frozen=True, slots=True)
class SwarmDecision:
    policy: SwarmPolicy
    catalog: SkillCatalog
    spend: SpendBook = field(default_factory=lambda: SpendBook({}))
    intent: IntentRouter = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "intent",
                           IntentRouter(self.catalog, self.policy.routing_threshold,
                                        self.policy.agent_id,
                                        semantic=self.policy.routing_semantic))

    async def decide(self, caller: Identity, envelope: Envelope, request: TaskRequest,
                     peers: Peers | None, task_id: str) -> Decision:
        """Admit, then plan, then the caller's own caps; raises ``Refusal`` or
        ``AuthError`` instead of a plan. The caps come last: once they reserved part of
        the caller's spending for ``task_id``, nothing refuses it any more."""
        admitted = self.policy.admit(envelope, caller)
        limits = self.spend.limits.get(caller.name)
        require_capabilities(caller.name, limits, request.capabilities_needed)
        plan = await self._plan(caller, limits, request, admitted, peers)
        needed = plan.skill.config.cost_usd if isinstance(plan, RunSkill) \
            else plan.price_usd if isinstance(plan, Delegate) else Decimal("0")
        budget = await self.spend.reserve(caller.name, task_id, admitted.budget_usd, needed)
        if budget is not admitted.budget_usd:  # a caller's caps clamped it (no copy else)
            admitted = replace(admitted, budget_usd=budget)
        return Decision(admitted, plan)

    async def rank(self, caller: Identity, text: str, chain: tuple[str, ...],
                   peers: Peers | None) -> Ranking:
        """What the intent router would choose for ``caller`` (``SkillContext.route``)."""
        limits = self.spend.limits.get(caller.name)
        return await self.intent.rank(caller, text, chain, peers,
                                      routable(limits, DELEGATE_SKILL))

    async def tools(self, caller: Identity, chain: tuple[str, ...], peers: Peers | None,
                    text: str = "") -> tuple[list[Skill], list[RouteCandidate]]:
        """What a plan for ``caller`` may call: the router's candidates (visibility and
        grants alike), less the planner skills themselves and the peers in ``chain``; for
        ``text``, only the router's best ``planner_shortlist`` of them for it."""
        limits = self.spend.limits.get(caller.name)
        allow = routable(limits, DELEGATE_SKILL) or (lambda _: True)
        skills = [s for s in self.catalog.visible(caller) if s.config.builtin != "planner"
                  and allow(local_candidate(s.config))]
        passed = {agent_key(a) for a in chain}
        found = [c for c in await self.intent.candidates(peers)
                 if c.peer and agent_key(c.peer) not in passed and allow(c)]
        k = self.policy.planner_shortlist
        if not text or len(skills) + len(found) <= k:
            return skills, found
        ranking = await self.intent.rank(caller, text, chain, peers,
                                         routable(limits, DELEGATE_SKILL), shown=k + 1)
        ranked = [s.candidate for s in ranking.ranked]
        # The router's best first; when it ranks fewer than k, the rest in their order.
        mine = [local_candidate(s.config) for s in skills]
        best = [c for c in dict.fromkeys([*ranked, *mine, *found])
                if c in found or c in mine][:k]
        ids = {c.skill_id for c in best if not c.peer}
        return [s for s in skills if s.id in ids], [c for c in found if c in best]

    def settle(self, task: Task) -> None:
        """``task`` has ended: what it spent counts against its caller's caps."""
        self.spend.settle(task)

    async def _plan(self, caller: Identity, limits: CallerLimits | None, request: TaskRequest,
                    admitted: Admitted, peers: Peers | None) -> Plan:
        if request.skill is None and not request.capabilities_needed:
            # In plain words: the intent router chooses among what the caller may see.
            chain = (*admitted.chain, self.policy.agent_id)
            intent = await self.intent.choose(caller, request.text, chain, peers,
                                              routable(limits, DELEGATE_SKILL))
            best = intent.ranking.best
            # The operator's view of each choice (the log line carries the trace id); its
            # text is made only when the line is written.
            if log.isEnabledFor(logging.INFO):
                log.info("intent router, for %s: %s", caller.name,
                         f"{best.candidate.label} ({best.score:.2f})"
                         + (f", a close call with {intent.ranking.closest()}"
                            if intent.ranking.rivals else "") if best is not None
                         else f"{intent.skill.id}, the first visible skill" if intent.skill
                         else f"nothing above the threshold; closest: "
                              f"{intent.ranking.closest()}")
            planner = self._planner_when_unsure(caller, intent)
            if planner is not None:
                return self._run(caller, limits, planner, request, admitted)
            if intent.skill is not None:
                return self._run(caller, limits, intent.skill, request, admitted)
            if intent.peer is None:
                return _refused(intent.ranking)
            target = intent.peer
            require_skill(caller.name, limits, DELEGATE_SKILL)
            assert peers is not None  # the router chose a peer: there are peers
            routed = await peers.plan((), (*admitted.chain, self.policy.agent_id),
                                      target.peer, target.skill_id or None)
            return self._delegate(routed, target.cost_usd, admitted,
                                  f"delegating to {target.peer}")
        skill = self._choose_skill(caller, request)
        if skill is not None:
            return self._run(caller, limits, skill, request, admitted)
        return await self._plan_delegation(caller, limits, request, admitted, peers)

    def _planner_when_unsure(self, caller: Identity, intent: Intent) -> Skill | None:
        """With ``planner.when: unsure``: the planner skill the caller may see, when the
        router declined (below the threshold, not for a text of greetings) or its best
        is a close call. The planner's own calls pass the same checks as any."""
        ranking = intent.ranking
        if self.policy.planner_when != "unsure" or not ranking.ranked:
            return None
        if ranking.best is not None and not ranking.rivals:
            return None
        return next((s for s in self.catalog.visible(caller)
                     if s.config.builtin == "planner"), None)

    @staticmethod
    def _run(caller: Identity, limits: CallerLimits | None, skill: Skill,
             request: TaskRequest, admitted: Admitted) -> RunSkill:
        require_skill(caller.name, limits, skill.id)
        require_accepted(skill, request)
        if skill.input_check is not None:  # before any task is made, on every binding
            skill.input_check.check(request.text, request.input)
        require_affordable(skill.config.cost_usd, admitted.budget_usd, f"skill {skill.id}")
        return RunSkill(skill)

    def _choose_skill(self, caller: Identity, request: TaskRequest) -> Skill | None:
        catalog = self.catalog
        named = catalog.find(request.skill) if request.skill is not None else None
        if named is not None and named.exposed and not named.visible_to(caller):
            # Exposed, but for another tier: the token is known, the ask is not allowed.
            raise AuthError("forbidden", f"skill {named.id!r} needs tier {named.config.tier!r}")
        return catalog.select(caller, skill_id=request.skill,
                              capabilities=request.capabilities_needed)

    async def _plan_delegation(self, caller: Identity, limits: CallerLimits | None,
                               request: TaskRequest, admitted: Admitted,
                               peers: Peers | None) -> Plan:
        if request.skill is not None and not request.capabilities_needed:
            require_skill(caller.name, limits, request.skill)
            # Unexposed and reserved skills look the same as missing ones.
            return NoPlan("unknown_skill", f"no skill {request.skill!r} here")
        caps = request.capabilities_needed
        if not caps or peers is None:
            return NoPlan("no_capable_skill",
                          "no exposed skill here provides what this task needs")
        # Before asking any peer (or a registry) for prices.
        require_skill(caller.name, limits, DELEGATE_SKILL)
        delegation = await peers.plan(caps, (*admitted.chain, self.policy.agent_id))
        if delegation.price_usd is None:
            return NoPlan("no_capable_skill", await _nobody_provides(peers, caps))
        return self._delegate(delegation, delegation.price_usd, admitted,
                              f"delegating {', '.join(caps)}")

    def _delegate(self, delegation: DelegationPlan, price: Decimal, admitted: Admitted,
                  what: str) -> Delegate:
        """Every delegation plan, by capability or routed, passes the same checks."""
        require_affordable(price, admitted.budget_usd, what)
        if not admitted.may_delegate:
            raise Refusal("depth_exceeded",
                          f"delegating would exceed max_depth {self.policy.max_depth}")
        return Delegate(delegation, price)


async def _nobody_provides(peers: Peers, caps: Sequence[str]) -> str:
    """Why no peer can take it. Asked again only on this failing path: a peer that provides
    it but is in the chain is the usual case between two instances that call each other."""
    wanted = ", ".join(caps)
    if (await peers.plan(caps, ())).targets:
        return (f"no skill here provides {wanted}, and the only peers that do are already in "
                "the caller chain: delegating to them would loop")
    return f"neither this agent nor any known peer provides {wanted}"


def _refused(ranking: Ranking) -> NoPlan:
    """Below the threshold: the task fails saying what came closest, or why nothing
    could be (only greetings, or no word any card has)."""
    if ranking.reason:
        return NoPlan("no_capable_skill", f"no skill or peer can be chosen: {ranking.reason}")
    return NoPlan("no_capable_skill",
                  f"no skill or peer matches this task well enough (threshold "
                  f"{ranking.threshold:g}); closest: {ranking.closest()}")
