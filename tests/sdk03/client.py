"""Run by the a2a-sdk 0.3.26 interpreter (tests/sdk03_support.py), never imported by the
suite: the official 0.3 client against a Butler. ``python client.py URL TOKEN SCENARIO``
prints one JSON object: what the client saw, or ``{"error": ...}``."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, TaskQueryParams, TextPart


def message(text: str, task_id: str | None = None) -> Message:
    return Message(message_id=uuid.uuid4().hex, role=Role.user, task_id=task_id,
                   parts=[Part(root=TextPart(text=text))])


def texts(task: Any) -> list[str]:
    return [p.root.text for a in task.artifacts or [] for p in a.parts
            if getattr(p.root, "text", None) is not None]


async def card_send_get(url: str, http: httpx.AsyncClient, streaming: bool) -> dict[str, Any]:
    card = await A2ACardResolver(http, url).get_agent_card()  # no A2A-Version: a 0.3 client
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
    events = [event async for event in client.send_message(message("hello"))]
    task = events[-1][0]  # type: ignore[index]
    got = await client.get_task(TaskQueryParams(id=task.id))
    return {"card_url": card.url, "protocol_version": card.protocol_version,
            "events": len(events), "state": got.status.state.value, "texts": texts(got)}


async def main() -> None:
    url, token, scenario = sys.argv[1:4]
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                 timeout=20) as http:
        try:
            if scenario == "send":
                out = await card_send_get(url, http, streaming=False)
            elif scenario == "stream":
                out = await card_send_get(url, http, streaming=True)
            else:
                raise SystemExit(f"unknown scenario {scenario!r}")
        except Exception as exc:  # the test reads what went wrong
            out = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out))


asyncio.run(main())
