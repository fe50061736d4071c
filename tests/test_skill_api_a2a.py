"""A python skill as a full A2A agent (examples/full_a2a_skill.py), driven by the official
a2a-sdk client: it reads the message's id, metadata, extensions, reference task ids and
file parts, enters ``auth-required``, reads the follow-up, and answers with a file part
and a message on the final status."""

from __future__ import annotations

import asyncio
from typing import Any

from a2a.types import (
    GetTaskRequest,
    Part,
    Role,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from tests.a2a_support import rpc, sdk_client, send_request, send_task, text, user_message
from tests.support import ECHO, Swarm, post_task

CONCIERGE = {"id": "concierge", "python": "examples.full_a2a_skill:concierge",
             "expose": True, "input_modes": ["text/plain", "application/json", "image/*"]}


async def test_a_skill_reads_the_whole_message_and_asks_for_authorisation(
        swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, CONCIERGE],
                             extra={"server": {"shutdown_grace_seconds": 0.2}})
    picture = Part(raw=b"\x89PNG", media_type="image/png", filename="room.png")
    picture.metadata.update({"angle": "north"})
    first = user_message(text("book the room"), picture,
                         metadata={"skill": "concierge", "note": "window seat"})
    first.extensions.append("urn:example:ext:booking")
    first.reference_task_ids.append("earlier-task")
    async with sdk_client(home) as client:
        task = await send_task(client, send_request(first))
        assert task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
        assert "authorise me" in task.status.message.parts[0].text
        seen: dict[str, Any] = MessageToDict(task.artifacts[0].parts[0].data)
        assert seen["messageId"] == first.message_id
        assert seen["metadata"]["note"] == "window seat"
        assert seen["extensions"] == ["urn:example:ext:booking"]
        assert seen["referenceTaskIds"] == ["earlier-task"]
        assert seen["files"] == [{"name": "room.png", "mimeType": "image/png"}]
        assert seen["partMetadata"] == [{"angle": "north"}]

    # A subscriber waits through auth-required (A2A 3.1.6) and sees the end.
    async with sdk_client(home, streaming=True) as watcher:
        events: list[StreamResponse] = []
        first_seen = asyncio.Event()

        async def watch() -> None:
            async for event in watcher.subscribe(SubscribeToTaskRequest(id=task.id)):
                events.append(event)
                first_seen.set()

        watching = asyncio.create_task(watch())
        async with asyncio.timeout(5):
            await first_seen.wait()
        async with sdk_client(home) as client:
            done = await send_task(client, send_request(user_message(
                text("yes"), task_id=task.id, metadata={"approvedBy": "me"})))
        async with asyncio.timeout(5):
            await watching
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert done.status.message.parts[0].text == "booked; the receipt is attached"
    result = done.artifacts[-1].parts
    assert result[0].text == "booked for operator"
    assert result[1].raw == b"booked\n" and result[1].media_type == "text/plain"
    assert result[1].filename == "receipt.txt"
    assert MessageToDict(result[1].metadata)["followUpMetadata"] == {"approvedBy": "me"}
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    chunks = [(e.artifact_update.append, e.artifact_update.last_chunk) for e in events
              if e.artifact_update.artifact.artifact_id == f"{task.id}-plan"]
    assert chunks == [(False, False), (True, True)]
    plan = next(a for a in done.artifacts if a.artifact_id == f"{task.id}-plan")
    assert "".join(p.text for p in plan.parts) == "1. hold the room. 2. confirm it."


QUICK = {"id": "quick", "python": "tests.plugins.a2a_skills:quick_reply", "expose": True}


async def test_a_skill_may_answer_with_a_message_only(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, QUICK])
    for binding in ("JSONRPC", "HTTP+JSON"):
        async with sdk_client(home, binding=binding) as client:
            events = [e async for e in client.send_message(send_request(
                user_message(text("hi"), metadata={"skill": "quick"})))]
        assert len(events) == 1 and events[0].HasField("message"), (binding, events)
        reply = events[0].message
        assert reply.parts[0].text == "re: hi" and reply.role == Role.ROLE_AGENT
        assert reply.task_id == "" and reply.context_id
        async with sdk_client(home, binding=binding, streaming=True) as client:
            streamed = [e async for e in client.send_message(send_request(
                user_message(text("yo"), metadata={"skill": "quick"})))]
        # A stream has shown the task before the skill answers, so it stays a task's
        # stream, ending completed with the reply as the result (docs/skills.md).
        kinds = [e.WhichOneof("payload") for e in streamed]
        assert kinds[0] == "task" and streamed[-1].status_update.status.state == \
            TaskState.TASK_STATE_COMPLETED, kinds
    _, body = await rpc(home, "message/send", {"message": {
        "kind": "message", "messageId": "m", "role": "user", "metadata": {"skill": "quick"},
        "parts": [{"kind": "text", "text": "old"}]}}, version=None)
    assert body["result"]["kind"] == "message" and body["result"]["role"] == "agent"
    assert body["result"]["parts"] == [{"kind": "text", "text": "re: old"}]
    status, task = await post_task(home, {"task": "v2", "skill": "quick"})
    assert status == 200 and task["output"] == "re: v2"  # /v2 still shows the task


STORY = {"id": "story", "python": "tests.plugins.a2a_skills:story", "expose": True}


async def test_an_artifact_streams_in_chunks(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, STORY])
    async with sdk_client(home, streaming=True) as client:
        first = [e async for e in client.send_message(send_request(
            user_message(text("tell"), metadata={"skill": "story"})))]
        task_id = first[0].task.id
        chunks = [e for e in first if e.HasField("artifact_update")]
        # The first chunk may be in the task the stream began with, or its own update.
        if chunks:
            assert not chunks[0].artifact_update.append
            assert not chunks[0].artifact_update.last_chunk
        else:
            assert [p.text for a in first[0].task.artifacts for p in a.parts] == ["Once "]
        second = [e async for e in client.send_message(send_request(
            user_message(text("go on"), task_id=task_id)))]
    updates = [e.artifact_update for e in second if e.HasField("artifact_update")
               and e.artifact_update.artifact.artifact_id == f"{task_id}-story"]
    assert [(u.append, u.last_chunk, u.artifact.parts[0].text) for u in updates] == [
        (True, False, "upon "), (True, True, "a time.")]
    async with sdk_client(home) as client:
        done = await client.get_task(GetTaskRequest(id=task_id))
    story = next(a for a in done.artifacts if a.artifact_id == f"{task_id}-story")
    assert "".join(p.text for p in story.parts) == "Once upon a time."
