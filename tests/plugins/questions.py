"""Plugin skills that ask their caller, for the multi-turn delegation tests."""

from __future__ import annotations

import asyncio
from pathlib import Path

from butler.skills.base import SkillContext, SkillOutput


async def survey(ctx: SkillContext) -> SkillOutput:
    """Asks for a colour, then (after reporting progress) for a sign-off, then answers."""
    colour = await ctx.request_input("which colour?")
    await ctx.progress(f"mixing {colour.text}")
    signed = await ctx.request_auth("sign off the mix")
    return f"{colour.text} paint, signed by {signed.text}"


async def ask_then_work(ctx: SkillContext) -> SkillOutput:
    """Asks one question, then works until the file ``input.gate`` exists: a peer task
    still running while the test kills and restarts its caller's daemon."""
    answer = await ctx.request_input("how many?")
    await ctx.progress(f"counting to {answer.text}")
    gate = Path(str(ctx.input["gate"]))
    while not gate.exists():  # the work: as long as the test needs, not a guessed time
        await asyncio.sleep(0.02)
    return f"counted to {answer.text}"


async def nag(ctx: SkillContext) -> SkillOutput:
    """Asks again after every answer: never done."""
    while True:
        await ctx.request_input("and again?")


async def story(ctx: SkillContext) -> SkillOutput:
    """Reports progress and streams one artifact in two chunks, the second once the file
    ``input.gate`` exists."""
    await ctx.progress("drafting")
    story_id = f"{ctx.task_id}-story"
    await ctx.emit_artifact("Once ", artifact_id=story_id, name="story", last_chunk=False)
    gate = Path(str(ctx.input["gate"]))
    while not gate.exists():
        await asyncio.sleep(0.02)
    await ctx.progress("finishing")
    await ctx.emit_artifact("upon a time.", artifact_id=story_id, append=True)
    return "told"
