"""A caller's grants (its token's ``limits.skills`` and ``limits.capabilities``): what it
may ask for, checked in the swarm decision before any work or outbound call."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from butler.config.model import CallerLimits
from butler.routing import RouteCandidate
from internal.protocol.a2a.model import AuthError


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
