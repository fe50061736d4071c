"""The swarm decision: one call, before any task runs or any peer is called.

Admission (a forged caller, a loop, the depth, the budget the caller may spend), then the
plan: a local skill, or a delegation by capability to the cheapest peer that can take it,
or no plan (the task is created and ends ``failed`` saying why). A refusal is raised as
``Refusal`` or ``AuthError`` and nothing is created.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from butler.skills.catalog import Skill, SkillCatalog
from butler.swarm.admission import Admitted, SwarmPolicy, require_affordable
from internal.protocol.a2a.model import (
    AuthError,
    Envelope,
    Identity,
    Refusal,
    RequestError,
    TaskRequest,
    media_type_matches,
)


class PeerPrices(Protocol):
    async def cheapest(self, capabilities: Sequence[str],
                       chain: tuple[str, ...]) -> Decimal | None:
        """The lowest price among peers that could take this, or None if none can."""


@dataclass(frozen=True, slots=True)
class RunSkill:
    skill: Skill


@dataclass(frozen=True, slots=True)
class Delegate:
    """No local skill fits; a peer provides ``capabilities`` within the budget."""

    capabilities: tuple[str, ...]
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

    async def decide(self, caller: Identity, envelope: Envelope, request: TaskRequest,
                     peers: PeerPrices | None) -> Decision:
        """Admit, then plan; raises ``Refusal`` or ``AuthError`` instead of a plan."""
        admitted = self.policy.admit(envelope, caller)
        skill = self._choose_skill(caller, request)
        if skill is not None:
            require_accepted(skill, request)
            require_affordable(skill.config.cost_usd, admitted.budget_usd, f"skill {skill.id}")
            return Decision(admitted, RunSkill(skill))
        return Decision(admitted, await self._plan_delegation(request, admitted, peers))

    def _choose_skill(self, caller: Identity, request: TaskRequest) -> Skill | None:
        catalog = self.catalog
        named = catalog.find(request.skill) if request.skill is not None else None
        if named is not None and named.exposed and not named.visible_to(caller):
            # Exposed, but for another tier: the token is known, the ask is not allowed.
            raise AuthError("forbidden", f"skill {named.id!r} needs tier {named.config.tier!r}")
        if request.skill is None and not request.capabilities_needed:
            return catalog.default_skill(caller)
        return catalog.select(caller, skill_id=request.skill,
                              capabilities=request.capabilities_needed)

    async def _plan_delegation(self, request: TaskRequest, admitted: Admitted,
                               peers: PeerPrices | None) -> Plan:
        if request.skill is not None and not request.capabilities_needed:
            # Unexposed and reserved skills look the same as missing ones.
            return NoPlan("unknown_skill", f"no skill {request.skill!r} here")
        caps = request.capabilities_needed
        if not caps or peers is None:
            return NoPlan("no_capable_skill",
                          "no exposed skill here provides what this task needs")
        price = await peers.cheapest(caps, (*admitted.chain, self.policy.agent_id))
        if price is None:
            return NoPlan("no_capable_skill",
                          f"neither this agent nor any known peer provides {', '.join(caps)}")
        require_affordable(price, admitted.budget_usd, f"delegating {', '.join(caps)}")
        if not admitted.may_delegate:
            raise Refusal("depth_exceeded",
                          f"delegating would exceed max_depth {self.policy.max_depth}")
        return Delegate(caps, price)
