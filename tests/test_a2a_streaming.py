"""A2A streaming: SendStreamingMessage and SubscribeToTask on both 1.0 bindings, with the
official a2a-sdk client. Streams begin with the task; a send's stream closes at a terminal
or interrupted state, a subscription's only at a terminal one (A2A 3.1.6)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from a2a.types import (
    CancelTaskRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
    UnsupportedOperationError,
)

from tests.a2a_support import (
    STEPS,
    WAIT,
    sdk_client,
    send_request,
    send_task,
    text,
    user_message,
)
from tests.support import ECHO, Swarm, wait_task, wait_until

BINDINGS = ["JSONRPC", "HTTP+JSON"]


def describe(event: StreamResponse) -> tuple[str, Any]:
    if event.HasField("task"):
        return "task", TaskState.Name(event.task.status.state)
    if event.HasField("status_update"):
        status = event.status_update.status
        note = status.message.parts[0].text if status.HasField("message") else ""
        return "status", (TaskState.Name(status.state), note)
    if event.HasField("artifact_update"):
        return "artifact", event.artifact_update.artifact.artifact_id
    return "message", event.message.message_id


@pytest.mark.parametrize("binding", BINDINGS)
async def test_stream_a_conversation(swarm: Swarm, binding: str) -> None:
    home = await swarm.start("home", skills=[ECHO, STEPS])
    async with sdk_client(home, binding=binding, streaming=True) as client:
        first = [e async for e in client.send_message(send_request(
            user_message(text("start"), metadata={"skill": "steps"})))]
        kinds = [describe(e) for e in first]
        assert kinds[0][0] == "task"
        assert kinds[-1] == ("status", ("TASK_STATE_INPUT_REQUIRED", "say go"))
        task_id = first[0].task.id

        second = [e async for e in client.send_message(send_request(
            user_message(text("go"), task_id=task_id)))]
        kinds = [describe(e) for e in second]
        assert kinds[0] == ("task", "TASK_STATE_WORKING")
        assert kinds[1:] == [
            ("status", ("TASK_STATE_WORKING", "step 1")),
            ("artifact", f"{task_id}-a1"),
            ("status", ("TASK_STATE_WORKING", "step 2")),
            ("artifact", f"{task_id}-result"),
            ("status", ("TASK_STATE_COMPLETED", "")),
        ]
        result = second[4].artifact_update.artifact
        assert result.parts[0].text == "done after go"
        assert all(e.status_update.task_id == task_id for e in second if e.HasField(
            "status_update"))


@pytest.mark.parametrize("binding", BINDINGS)
async def test_subscribe_to_a_running_task(swarm: Swarm, binding: str) -> None:
    home = await swarm.start("home", skills=[ECHO, WAIT])
    async with sdk_client(home, binding=binding) as client:
        task_id = (await send_task(client, send_request(user_message(
            text("x"), metadata={"skill": "wait"}), return_immediately=True))).id
    async with sdk_client(home, binding=binding, streaming=True) as client:
        await wait_task(home, task_id, {"working"}, message="waiting")
        seen: list[tuple[str, Any]] = []

        async def watch() -> None:
            async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                seen.append(describe(event))

        watcher = asyncio.create_task(watch())
        await wait_until(lambda: seen, 5)
        assert seen == [("task", "TASK_STATE_WORKING")]
        await client.cancel_task(CancelTaskRequest(id=task_id))
        async with asyncio.timeout(5):
            await watcher
        assert seen[-1][1][0] == "TASK_STATE_CANCELED"
        with pytest.raises(UnsupportedOperationError):
            async for _ in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                pass


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_subscription_stays_open_while_the_task_waits_for_input(
        swarm: Swarm, binding: str) -> None:
    home = await swarm.start("home", skills=[ECHO, STEPS])
    async with sdk_client(home, binding=binding, streaming=True) as client:
        first = [e async for e in client.send_message(send_request(
            user_message(text("start"), metadata={"skill": "steps"})))]
        task_id = first[0].task.id
        seen: list[tuple[str, Any]] = []
        first_seen = asyncio.Event()

        async def watch() -> None:
            async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                seen.append(describe(event))
                first_seen.set()

        watcher = asyncio.create_task(watch())
        async with asyncio.timeout(5):
            await first_seen.wait()
        assert seen == [("task", "TASK_STATE_INPUT_REQUIRED")] and not watcher.done()
        [e async for e in client.send_message(send_request(
            user_message(text("go"), task_id=task_id)))]
        async with asyncio.timeout(5):
            await watcher
        assert seen[-1] == ("status", ("TASK_STATE_COMPLETED", ""))
        assert ("artifact", f"{task_id}-result") in seen


@pytest.mark.parametrize("binding", BINDINGS)
async def test_stream_of_an_instant_task_is_the_task(swarm: Swarm, binding: str) -> None:
    home = await swarm.start("home")
    async with sdk_client(home, binding=binding, streaming=True) as client:
        events = [describe(e) async for e in client.send_message(send_request(
            user_message(text("hi"))))]
    assert events[0][0] == "task"
    assert events[-1] == ("status", ("TASK_STATE_COMPLETED", "")) or events == [
        ("task", "TASK_STATE_COMPLETED")]


async def test_raw_sse_frames(swarm: Swarm) -> None:
    home = await swarm.start("home")
    body = {"jsonrpc": "2.0", "id": 9, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}}
    headers = {**home.headers(), "A2A-Version": "1.0"}
    async with home.session.post(home.url + "/a2a/jsonrpc", json=body, headers=headers) as resp:
        assert resp.status == 200 and resp.content_type == "text/event-stream"
        raw = (await resp.read()).decode()
    frames = [f for f in raw.split("\n\n") if f.strip()]
    assert frames and all(f.startswith("data: {") for f in frames)
    assert '"id":9' in frames[0] and '"result":{"task":' in frames[0]
    body["method"] = "SubscribeToTask"
    body["params"] = {"id": "missing"}
    async with home.session.post(home.url + "/a2a/jsonrpc", json=body, headers=headers) as resp:
        assert resp.content_type == "application/json"
        assert (await resp.json())["error"]["code"] == -32001
