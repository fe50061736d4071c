"""A plugin skill that asks the intent router where a task in plain words should go."""

from __future__ import annotations

from butler.routing import explain
from butler.skills.base import SkillContext, SkillOutput, SkillResult
from internal.protocol.a2a.model import Part


async def where(ctx: SkillContext) -> SkillOutput:
    """Ranks ``input.ask`` and, when something is chosen, delegates to that peer."""
    ranking = await ctx.route(str(ctx.input.get("ask", "")))
    best = ranking.best
    ranked = [{"label": s.candidate.label, "score": s.score} for s in ranking.ranked]
    if best is None or not best.candidate.peer:
        return SkillResult(parts=(Part(text=explain(ranking)), Part(data={"ranked": ranked})))
    done = await ctx.delegate(peer=best.candidate.peer, task=ranking.text)
    return SkillResult(parts=(Part(text=explain(ranking)),
                              Part(data={"ranked": ranked, "peer": done.peer,
                                         "state": done.state})))
