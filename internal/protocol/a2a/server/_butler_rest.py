"""Butler's /v2 REST binding: a thin adapter from HTTP to the ``TaskService``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from internal.http import (
    SseTiming,
    document_route,
    identity_of,
    json_bytes_response,
    json_response,
    read_json,
    sse_stream,
)
from internal.protocol.a2a.codec import butler_v2, exact_json, swarm_envelope
from internal.protocol.a2a.model import RequestError, TaskEvent, TaskState
from internal.protocol.a2a.server._service import TaskService

# The OpenAPI document of this binding, shipped as package data and served as JSON.
BUTLER_V2 = ("internal.protocol.a2a.server", "butler-v2.yaml")
BUTLER_V2_PATH = "/v2/openapi.json"


@dataclass(frozen=True)
class RestLimits:
    max_json_depth: int
    body_seconds: float
    max_page_size: int
    sse_keepalive_seconds: float = 15.0
    sse_poll_seconds: float = 1.0


class RestBinding:
    def __init__(self, service: TaskService, limits: RestLimits) -> None:
        self.service = service
        self.limits = limits

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/v2/card", self.card),
            web.post("/v2/tasks", self.submit),
            web.get("/v2/tasks", self.list_tasks),
            web.get("/v2/tasks/{id}", self.get),
            web.post("/v2/tasks/{id}/cancel", self.cancel),
            web.post("/v2/tasks/{id}/input", self.answer),
            web.get("/v2/tasks/{id}/events", self.events),
            document_route(BUTLER_V2_PATH, *BUTLER_V2),
        ]

    async def _body(self, request: web.Request) -> dict[str, object]:
        body = await read_json(request, max_depth=self.limits.max_json_depth,
                               body_seconds=self.limits.body_seconds)
        if not isinstance(body, dict):
            raise RequestError("invalid_request", "request body must be a JSON object")
        return body

    async def card(self, request: web.Request) -> web.Response:
        return json_response(self.service.card(identity_of(request)))

    async def submit(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        task_request = butler_v2.decode_task_request(body)
        incoming = swarm_envelope.decode_v2_envelope(body, request.headers)
        task = await self.service.submit(identity_of(request), task_request, incoming)
        status = 200 if task_request.blocking else 202
        return json_bytes_response(butler_v2.task_json(task), status=status,
                                   headers={swarm_envelope.TRACE_HEADER: task.trace_id})

    async def get(self, request: web.Request) -> web.Response:
        task = await self.service.get(identity_of(request), request.match_info["id"])
        return json_bytes_response(butler_v2.task_json(task))

    async def list_tasks(self, request: web.Request) -> web.Response:
        query = request.query
        state = None
        if "state" in query:
            try:
                state = TaskState(query["state"])
            except ValueError:
                names = ", ".join(s.value for s in TaskState)
                raise RequestError("invalid_params", f"state must be one of {names}") from None
        limit_text = query.get("limit", "50")
        if not (limit_text.isascii() and limit_text.isdigit()) \
                or not 1 <= int(limit_text) <= self.limits.max_page_size:
            raise RequestError("invalid_params",
                               f"limit must be an integer in 1..{self.limits.max_page_size}")
        page = await self.service.list_tasks(
            identity_of(request), state=state, context_id=query.get("context_id"),
            cursor=query.get("cursor"), limit=int(limit_text))
        return json_response({"tasks": [butler_v2.encode_task(t) for t in page.tasks],
                              "next_cursor": page.next_cursor})

    async def cancel(self, request: web.Request) -> web.Response:
        task = await self.service.cancel(identity_of(request), request.match_info["id"])
        return json_response(butler_v2.encode_task(task))

    async def answer(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        reply = butler_v2.decode_task_request(body)
        task = await self.service.answer(identity_of(request), request.match_info["id"], reply)
        return json_response(butler_v2.encode_task(task))

    async def events(self, request: web.Request) -> web.StreamResponse:
        stream = self.service.events(identity_of(request), request.match_info["id"])
        first = await anext(stream)  # raises 404 before any bytes are sent
        timing = SseTiming(self.limits.sse_keepalive_seconds, self.limits.sse_poll_seconds)
        return await sse_stream(request, event_frame(first), _frames(stream), timing)


async def _frames(stream: AsyncIterator[TaskEvent]) -> AsyncIterator[bytes]:
    try:
        async for event in stream:
            yield event_frame(event)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


def event_frame(event: TaskEvent) -> bytes:
    if event.kind == "artifact" and event.artifact is not None:
        data: dict[str, Any] = {"task_id": event.task.wire_id,
                                "artifact": butler_v2.encode_artifact(event.artifact)}
        if event.append or not event.last_chunk:  # a chunk of an artifact sent in pieces
            data.update(append=event.append, last_chunk=event.last_chunk)
    else:
        data = butler_v2.encode_task(event.task)
    return f"event: {event.kind}\ndata: {exact_json.dumps(data)}\n\n".encode()
