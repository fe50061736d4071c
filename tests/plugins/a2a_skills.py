"""Plugin skills for the standard A2A tests."""

from __future__ import annotations

import asyncio

from butler.skills.base import SkillContext, SkillOutput, SkillResult
from internal.protocol.a2a.model import Part


async def wait(ctx: SkillContext) -> SkillOutput:
    """Reports progress, then runs until canceled (or 30 s pass)."""
    await ctx.progress("waiting")
    await asyncio.sleep(30)
    return "waited"


async def quick_reply(ctx: SkillContext) -> SkillOutput:
    """Answers with a message only, no task (A2A allows either)."""
    return SkillResult(parts=(Part(text=f"re: {ctx.text}"),), as_message=True)
