"""A python skill that uses what the skill API offers a standard A2A agent.

Configure it with::

    skills:
      - {id: concierge, python: "examples.full_a2a_skill:concierge", expose: true,
         input_modes: ["text/plain", "application/json", "image/*"]}

It reads the caller's message (id, metadata, extensions, reference task ids, file
parts), reports what it saw as an artifact, asks the caller to authorise it
(``auth-required``), reads the follow-up, streams an artifact in two chunks, and answers
with text, a file part and a message on the final status. (A skill can also answer with
a message only: ``SkillResult(..., as_message=True)``.) docs/skills.md walks through it.
"""

from __future__ import annotations

import base64

from butler.skills.base import SkillContext, SkillResult
from internal.protocol.a2a.model import Part


async def concierge(ctx: SkillContext) -> SkillResult:
    seen = {
        "messageId": ctx.message_id,
        "contextId": ctx.context_id,
        "metadata": ctx.metadata,
        "extensions": list(ctx.extensions),
        "referenceTaskIds": list(ctx.reference_task_ids),
        "files": [{"name": p.file.get("name", ""), "mimeType": p.file.get("mimeType", "")}
                  for p in ctx.parts if p.file is not None],
        "partMetadata": [p.metadata for p in ctx.parts if p.metadata],
    }
    await ctx.emit_artifact([Part(data=seen)], name="what I was given")
    reply = await ctx.request_auth("authorise me to book: answer 'yes' once you have")
    if reply.text.strip().lower() != "yes":
        ctx.fail("not_authorised", "the caller did not authorise the booking")
    follow_up = reply.message.metadata if reply.message is not None else None
    # One artifact streamed in two chunks under a stable id (A2A append / lastChunk).
    plan = f"{ctx.task_id}-plan"
    await ctx.emit_artifact("1. hold the room. ", artifact_id=plan, name="plan",
                            last_chunk=False)
    await ctx.emit_artifact("2. confirm it.", artifact_id=plan, append=True)
    receipt = base64.b64encode(b"booked\n").decode()
    return SkillResult(
        parts=(Part(text=f"booked for {ctx.caller}"),
               Part(file={"bytes": receipt, "mimeType": "text/plain", "name": "receipt.txt"},
                    metadata={"followUpMetadata": follow_up or {}})),
        status_message="booked; the receipt is attached",
    )
