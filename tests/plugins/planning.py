"""A plugin skill that asks the router and then the planner (``ctx.route``, ``ctx.plan``)."""

from __future__ import annotations

from butler.skills.base import SkillContext, SkillOutput, SkillResult
from internal.protocol.a2a.model import Part


async def plan_and_report(ctx: SkillContext) -> SkillOutput:
    ranking = await ctx.route(ctx.text)
    done = await ctx.plan(ctx.text)
    return SkillResult(parts=(Part(text=f"planned: {done.text}"), Part(data={
        "routed": ranking.best.candidate.label if ranking.best else None,
        "steps": done.steps, "tool_calls": list(done.tool_calls),
        "spent_usd": str(done.spent_usd)})))
