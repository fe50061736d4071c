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


async def story(ctx: SkillContext) -> SkillOutput:
    """Streams one artifact in three chunks, waiting for a go-ahead after the first."""
    story_id = f"{ctx.task_id}-story"
    await ctx.emit_artifact("Once ", artifact_id=story_id, name="story", last_chunk=False)
    await ctx.request_input("more?")
    await ctx.emit_artifact("upon ", artifact_id=story_id, append=True, last_chunk=False)
    await ctx.emit_artifact("a time.", artifact_id=story_id, append=True, last_chunk=True)
    return "told"


async def ten_ms(ctx: SkillContext) -> SkillOutput:
    """Takes about 10 ms: its task's first and last audit records share one batch."""
    await asyncio.sleep(0.01)
    return "done"
