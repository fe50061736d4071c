"""Plugin skills for the standard A2A tests."""

from __future__ import annotations

import asyncio

from butler.skills.base import SkillContext, SkillOutput


async def wait(ctx: SkillContext) -> SkillOutput:
    """Reports progress, then runs until canceled (or 30 s pass)."""
    await ctx.progress("waiting")
    await asyncio.sleep(30)
    return "waited"
