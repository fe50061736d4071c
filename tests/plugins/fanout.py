"""Plugin skills used by the delegation tests."""

from __future__ import annotations

from butler.skills.base import DelegationError, SkillContext, SkillOutput


async def fan_out(ctx: SkillContext) -> SkillOutput:
    """Delegates ``input.children`` times to ``input.capability`` and reports the grants."""
    grants = []
    for _ in range(int(ctx.input.get("children", 1))):
        before = ctx.budget_left
        try:
            result = await ctx.delegate(capabilities=[ctx.input["capability"]], task=ctx.text)
        except DelegationError as err:
            grants.append({"left_before": str(before), "spent": "0", "state": err.code})
            continue
        grants.append({"left_before": str(before), "spent": str(result.spent_usd),
                       "state": result.state})
    return {"grants": grants, "left": str(ctx.budget_left)}


async def share(ctx: SkillContext) -> SkillOutput:
    """Writes then reads the delegation tree's workspace."""
    await ctx.workspace_put("note", {"text": ctx.text})
    return {"read_back": await ctx.workspace_get("note")}
