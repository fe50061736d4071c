"""The lab's skill of the three-hop walkthrough (docs/delegation.md#a-walkthrough-home-office-lab):
it asks its caller a question, reports progress, writes a report and answers."""

from __future__ import annotations

import asyncio

from butler.skills.base import SkillContext, SkillOutput


async def dye(ctx: SkillContext) -> SkillOutput:
    colour = await ctx.request_input("Which colour should the sample be dyed?")
    await ctx.progress(f"dyeing the sample {colour.text}")
    await asyncio.sleep(1)  # the dye takes a moment
    await ctx.emit_artifact(f"Sample 7 dyed {colour.text}; ready on the bench.",
                            name="lab report")
    return f"The sample is dyed {colour.text}."
