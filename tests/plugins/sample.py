"""Plugin skills used by the task and skill tests: one function per SkillContext feature."""

from __future__ import annotations

import asyncio

from butler.skills.base import SkillContext, SkillOutput, SkillResult
from internal.protocol.a2a.model import Part


async def steps(ctx: SkillContext) -> SkillOutput:
    """Waits for a go-ahead, then reports progress around one artifact."""
    go = await ctx.request_input("say go")
    await ctx.progress("step 1")
    await ctx.emit_artifact([Part(text="first"), Part(data={"n": 1})], name="a1",
                            description="the first artifact")
    await ctx.progress("step 2")
    return f"done after {go.text}"


async def ask_name(ctx: SkillContext) -> SkillOutput:
    answer = await ctx.request_input("what is your name?")
    name = answer.input.get("name") or answer.text
    return f"hello {name}"


async def refuse(ctx: SkillContext) -> SkillOutput:
    ctx.reject(f"will not do {ctx.text!r}")


async def fail(ctx: SkillContext) -> SkillOutput:
    ctx.fail("plugin_said_no", "the plugin failed on purpose")


async def explode(ctx: SkillContext) -> SkillOutput:
    raise RuntimeError("boom")


async def about(ctx: SkillContext) -> SkillOutput:
    """What the context tells a skill, as a data part."""
    return {
        "task_id": ctx.task_id, "context_id": ctx.context_id, "skill_id": ctx.skill_id,
        "text": ctx.text, "input": ctx.input, "caller": ctx.caller, "chain": list(ctx.chain),
        "trace_id": ctx.trace_id, "budget_left": str(ctx.budget_left),
    }


async def stubborn(ctx: SkillContext) -> SkillOutput:
    """Ignores cancellation and returns a result anyway: it must be discarded."""
    await ctx.progress("waiting")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        await ctx.emit_artifact("too late")
        return SkillResult(parts=(Part(text="late result"),))
    return "finished"


async def hang(ctx: SkillContext) -> SkillOutput:
    """Waits until cancelled, and says so in its progress: what a run's time limit ends."""
    await ctx.progress("waiting")
    try:
        await asyncio.Event().wait()
    finally:
        await ctx.progress("cancelled")
    return "never"
