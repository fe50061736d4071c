"""Skills whose output no JSON store can keep as it is, chosen by the task's text."""

from __future__ import annotations

from typing import Any

from butler.skills.base import SkillContext, SkillOutput, SkillResult
from internal.protocol.a2a.model import Artifact, Part


def nested(depth: int) -> Any:
    """A value nested ``depth`` lists deep."""
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


class NotJson:
    """A value JSON has no form for."""


async def garbage(ctx: SkillContext) -> SkillOutput:
    kind = ctx.text
    if kind == "surrogate":  # text cut by UTF-16 units at an emoji
        return {"text": "\U0001f600"[:1] + "cut at \ud83d"}
    if kind == "deep":
        return {"deep": nested(10_000)}
    if kind == "object":
        return {"x": NotJson()}
    if kind == "nan":
        return {"n": float("nan")}
    if kind == "huge":
        return {"n": 10**400}
    if kind == "progress":
        await ctx.progress("half way \udc00")
        return "never kept"
    if kind == "artifact":
        await ctx.emit_artifact([Part(text="ok")], name="first")
        await ctx.emit_artifact([Part(data={"bad": "\ud800"})], name="second")
        return "never kept"
    if kind == "result":
        return SkillResult(parts=(Part(text="fine"),), artifacts=(
            Artifact("a1", (Part(text="\udfff"),)),))
    return "plain"
