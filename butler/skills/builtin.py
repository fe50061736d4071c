"""Built-in skills: echo, and the memory skills over this instance's ``MemoryStore``."""

from __future__ import annotations

from typing import Any

from butler.memory import MemoryStore
from butler.skills.base import SkillContext, SkillFailed, SkillFunction, SkillOutput, SkillResult
from butler.skills.fidelity import LOSSLESS
from internal.protocol.a2a.model import Part
from internal.shares import PoolFull

# Builtins run in the daemon, on the skill API itself.
FIDELITY = LOSSLESS


async def echo(ctx: SkillContext) -> SkillOutput:
    parts: list[Part] = []
    if ctx.text:
        parts.append(Part(text=ctx.text))
    if ctx.input:
        parts.append(Part(data=ctx.input))
    parts.extend(p for p in ctx.parts if p.text is None or p.text != ctx.text)
    return SkillResult(parts=tuple(parts))


def _arg(ctx: SkillContext, name: str, *, default: Any = None) -> Any:
    return ctx.input.get(name, default)


def memory_skills(store: MemoryStore) -> dict[str, SkillFunction]:
    async def write(ctx: SkillContext) -> SkillOutput:
        text = _arg(ctx, "text") or ctx.text
        key = _arg(ctx, "key")
        tags = _arg(ctx, "tags", default=[])
        if not isinstance(text, str) or not text.strip():
            raise SkillFailed("invalid_input", "memory.write needs text (the task or input.text)")
        if key is not None and not isinstance(key, str):
            raise SkillFailed("invalid_input", "input.key must be a string")
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise SkillFailed("invalid_input", "input.tags must be a list of strings")
        try:
            memory = await store.write(text, key=key, tags=tags, source=ctx.caller)
        except ValueError as exc:
            raise SkillFailed("invalid_input", str(exc)) from None
        except PoolFull as exc:  # the caller's share of the memories (shares.memory_entries)
            raise SkillFailed("memory_full", exc.message) from None
        return SkillResult(parts=(
            Part(text=f"saved memory {memory.key or memory.id}"),
            Part(data={"memory": memory.to_json()}),
        ))

    async def read(ctx: SkillContext) -> SkillOutput:
        ref = _arg(ctx, "key") or _arg(ctx, "id") or ctx.text.strip()
        if not isinstance(ref, str) or not ref:
            raise SkillFailed("invalid_input", "memory.read needs input.key, input.id or text")
        memory = await store.read(ref)
        if memory is None:
            raise SkillFailed("memory_not_found", f"no memory with id or key {ref!r}")
        return SkillResult(parts=(Part(text=memory.text), Part(data={"memory": memory.to_json()})))

    async def search(ctx: SkillContext) -> SkillOutput:
        query = _arg(ctx, "query") or ctx.text
        limit = _arg(ctx, "limit", default=10)
        if not isinstance(query, str) or not query.strip():
            raise SkillFailed("invalid_input", "memory.search needs a query (text or input.query)")
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise SkillFailed("invalid_input", "input.limit must be an integer")
        hits = await store.search(query, limit=limit)
        lines = [f"- {h.memory.text}" for h in hits] or ["nothing found"]
        return SkillResult(parts=(
            Part(text="\n".join(lines)),
            Part(data={"hits": [h.to_json() for h in hits]}),
        ))

    return {"memory.write": write, "memory.read": read, "memory.search": search}


async def planner(ctx: SkillContext) -> SkillOutput:
    """The LLM planner as a skill: the answer is streamed into the task's ``answer``
    artifact as the model writes it, and that artifact is the result."""
    if not ctx.text.strip():
        raise SkillFailed("invalid_input", "the planner needs a task in plain words")
    await ctx.plan(ctx.text, stream=True)
    return SkillResult()
