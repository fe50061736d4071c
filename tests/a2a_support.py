"""Helpers for the standard A2A tests: the official a2a-sdk client, raw JSON-RPC calls."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.types import (
    CancelTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskNotCancelableError,
    TaskState,
)

from tests.support import Instance, wait_task

JSONRPC = "/a2a/jsonrpc"
V1 = {"A2A-Version": "1.0"}

WAIT = {"id": "wait", "python": "tests.plugins.a2a_skills:wait", "expose": True,
        "capabilities": ["wait"]}
ASK = {"id": "ask", "python": "tests.plugins.sample:ask_name", "expose": True,
       "capabilities": ["ask"]}
STEPS = {"id": "steps", "python": "tests.plugins.sample:steps", "expose": True,
         "capabilities": ["steps"]}


@contextlib.asynccontextmanager
async def sdk_client(inst: Instance, who: str = "operator", *, binding: str = "JSONRPC",
                     streaming: bool = False, polling: bool = False,
                     token: str | None = None) -> AsyncIterator[Client]:
    """The official client, built from the agent's well-known card."""
    headers = {"Authorization": f"Bearer {token or inst.tokens[who]}"}
    async with httpx.AsyncClient(headers=headers, timeout=20) as http:
        config = ClientConfig(httpx_client=http, streaming=streaming, polling=polling,
                              supported_protocol_bindings=[binding])
        client = await ClientFactory(config).create_from_url(inst.url)
        try:
            yield client
        finally:
            await client.close()


def user_message(*parts: Part, task_id: str = "", context_id: str = "",
                 metadata: dict[str, Any] | None = None) -> Message:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=list(parts),
                      task_id=task_id, context_id=context_id)
    if metadata:
        message.metadata.update(metadata)
    return message


def text(value: str) -> Part:
    return Part(text=value)


def send_request(message: Message, *, history_length: int | None = None,
                 return_immediately: bool = False) -> SendMessageRequest:
    config = SendMessageConfiguration(return_immediately=return_immediately)
    if history_length is not None:
        config.history_length = history_length
    return SendMessageRequest(message=message, configuration=config)


async def rpc(inst: Instance, method: str, params: Any = None, *, who: str = "operator",
              version: str | None = "1.0", request_id: Any = 1,
              raw: bytes | None = None) -> tuple[int, Any]:
    """One JSON-RPC call with aiohttp: (HTTP status, decoded body)."""
    headers = inst.headers(who)
    if version is not None:
        headers["A2A-Version"] = version
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    kwargs: dict[str, Any] = {"data": raw} if raw is not None else {"json": body}
    async with inst.session.post(inst.url + JSONRPC, headers=headers, **kwargs) as resp:
        return resp.status, await resp.json(content_type=None)


def plain_message(text_value: str = "hello", **extra: Any) -> dict[str, Any]:
    """A 1.0 message as JSON."""
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
            "parts": [{"text": text_value}], **extra}


def error_reason(error: dict[str, Any]) -> str:
    infos = [d for d in error.get("data", []) if d.get("@type", "").endswith("ErrorInfo")]
    return str(infos[0]["reason"]) if infos else ""


async def send_task(client: Client, request: SendMessageRequest) -> Task:
    """The task of a non-streaming send (the one event the client yields)."""
    events = [event async for event in client.send_message(request)]
    assert len(events) == 1 and events[0].HasField("task"), events
    return events[0].task


async def cancel_a_waiting_task(client: Client, inst: Instance) -> None:
    """A running ``wait`` task is canceled once; a second cancel is refused."""
    waiting = await send_task(client, send_request(
        user_message(text("x"), metadata={"skill": "wait"}), return_immediately=True))
    await wait_task(inst, waiting.id, {"working"}, message="waiting")
    canceled = await client.cancel_task(CancelTaskRequest(id=waiting.id))
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    with pytest.raises(TaskNotCancelableError):
        await client.cancel_task(CancelTaskRequest(id=waiting.id))
