"""The A2A 0.3 JSON-RPC methods on the same endpoint, with the official SDK's 0.3 client
(its compat transport, which validates every answer against the 0.3 models)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.compat.v0_3 import types as v03
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    SubscribeToTaskRequest,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
)

from tests.a2a_support import (
    JSONRPC,
    STEPS,
    WAIT,
    rpc,
    send_request,
    send_task,
    text,
    user_message,
)
from tests.support import ECHO, Instance, Swarm, wait_task


@contextlib.asynccontextmanager
async def v03_client(inst: Instance, who: str = "operator", *,
                     streaming: bool = False) -> AsyncIterator[Client]:
    card = AgentCard(
        name="x", description="x", version="x", skills=[],
        capabilities=AgentCapabilities(streaming=True, extended_agent_card=True),
        supported_interfaces=[AgentInterface(url=inst.url + JSONRPC, protocol_binding="JSONRPC",
                                             protocol_version="0.3")])
    headers = {"Authorization": f"Bearer {inst.tokens[who]}"}
    async with httpx.AsyncClient(headers=headers, timeout=20) as http:
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
        try:
            yield client
        finally:
            await client.close()


async def test_v03_client_send_get_cancel_and_card(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, WAIT, {**ECHO, "id": "x", "tier": "gold"}],
                             callers={"operator": {}, "vip": {"tier": "gold"}})
    async with v03_client(home) as client:
        # "echo": words to route by (a greeting alone is declined since issue 35).
        task = await send_task(client, send_request(user_message(text("echo hello"))))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.artifacts[-1].parts[0].text == "echo hello"
        got = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
        assert len(got.history) == 1 and got.history[0].parts[0].text == "echo hello"
        waiting = await send_task(client, send_request(
            user_message(text("x"), metadata={"skill": "wait"}), return_immediately=True))
        await wait_task(home, waiting.id, {"working"})
        canceled = await client.cancel_task(CancelTaskRequest(id=waiting.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=waiting.id))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="nope"))
    async with v03_client(home, "vip") as client:
        card = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
        assert sorted(s.id for s in card.skills) == ["echo", "wait", "x"]


async def test_v03_streaming_and_resubscribe(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, STEPS])
    async with v03_client(home, streaming=True) as client:
        events = [e async for e in client.send_message(send_request(
            user_message(text("go?"), metadata={"skill": "steps"})))]
        assert events[0].HasField("task")
        last = events[-1].status_update.status
        assert last.state == TaskState.TASK_STATE_INPUT_REQUIRED
        task_id = events[0].task.id
        # A subscription stays open while the task waits for input (A2A 3.1.6) and
        # ends only at its terminal state.
        resubscribed: list[Any] = []
        first_seen = asyncio.Event()

        async def watch() -> None:
            async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                resubscribed.append(event)
                first_seen.set()

        watcher = asyncio.create_task(watch())
        async with asyncio.timeout(5):
            await first_seen.wait()
        assert resubscribed[0].HasField("task") and not watcher.done()
        events = [e async for e in client.send_message(send_request(
            user_message(text("go"), task_id=task_id)))]
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        assert any(e.artifact_update.artifact.artifact_id == f"{task_id}-a1" for e in events)
        async with asyncio.timeout(5):
            await watcher
        assert resubscribed[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_v03_wire_shapes(swarm: Swarm) -> None:
    home = await swarm.start("home")
    message = {"kind": "message", "messageId": "m1", "role": "user",
               "parts": [{"kind": "text", "text": "hi"},
                         {"kind": "file", "file": {"uri": "https://x/y.png",
                                                   "mimeType": "image/png"}}]}
    status, body = await rpc(home, "message/send", {"message": message}, version=None)
    assert status == 200, body
    task: dict[str, Any] = body["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    v03.Task.model_validate(task)
    parts = task["artifacts"][-1]["parts"]
    assert parts == [{"kind": "text", "text": "hi"},
                     {"kind": "file", "file": {"uri": "https://x/y.png",
                                               "mimeType": "image/png"}}]
    _, body = await rpc(home, "tasks/get", {"id": task["id"]}, version="0.3")
    assert body["result"]["id"] == task["id"]
    _, body = await rpc(home, "agent/getAuthenticatedExtendedCard", version=None)
    v03.AgentCard.model_validate(body["result"])
    assert body["result"]["url"] == home.url + JSONRPC


@pytest.mark.parametrize(("method", "params", "version", "code"), [
    ("message/send", {"message": {"kind": "message", "messageId": "m", "role": "user",
                                  "parts": [{"kind": "text", "text": "x"}]}}, "1.0", -32603),
    ("tasks/get", {"id": "nope"}, None, -32001),
    ("tasks/get", {}, None, -32602),
    ("message/send", {"message": {"messageId": "m", "role": "robot",
                                  "parts": [{"kind": "text", "text": "x"}]}}, None, -32602),
    ("message/send", {"message": {"messageId": "m", "role": "user",
                                  "parts": [{"kind": "sound"}]}}, None, -32602),
    ("tasks/list", {}, None, -32601),
])
async def test_v03_errors(swarm: Swarm, method: str, params: dict[str, Any],
                          version: str | None, code: int) -> None:
    home = await swarm.start("home")
    status, body = await rpc(home, method, params, version=version)
    assert status == 200 and body["error"]["code"] == code, body
