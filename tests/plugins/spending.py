"""Plugin skills for the spend-limit tests: proof of whether a skill ran."""

from __future__ import annotations

from pathlib import Path

from butler.skills.base import SkillContext, SkillOutput


async def record(ctx: SkillContext) -> SkillOutput:
    """Appends its task id to the file its input names: a refused task leaves no line."""
    with Path(str(ctx.input["log"])).open("a", encoding="utf-8") as log:
        log.write(ctx.task_id + "\n")
    return "recorded"
