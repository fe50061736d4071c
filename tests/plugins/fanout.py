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


async def note(ctx: SkillContext) -> SkillOutput:
    """Reads the tree's note when asked to, else keeps the text as the note. One skill, so
    that a standard A2A caller (no capabilities on the wire) reaches both."""
    if ctx.text == "read the note":
        return {"note": await ctx.workspace_get("note")}
    await ctx.workspace_put("note", ctx.text)
    return {"put": ctx.text}


async def put_then_get(ctx: SkillContext) -> SkillOutput:
    """Two sibling delegations of one tree: the second reads what the first wrote."""
    await ctx.delegate(capabilities=["note.put"], task=ctx.text)
    got = await ctx.delegate(capabilities=["note.get"], task="read the note")
    return got.parts[0].data if got.parts else None


async def get_only(ctx: SkillContext) -> SkillOutput:
    got = await ctx.delegate(capabilities=["note.get"], task="read the note")
    return got.parts[0].data if got.parts else None
