"""The A2A 1.0 HTTP+JSON (REST) binding, functionally equivalent to JSON-RPC.

Errors are ``google.rpc.Status`` shaped: ``{"error": {"code": <HTTP status>, "status",
"message", "details": [ErrorInfo]}}`` with the HTTP status from ``ERROR_TABLE``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from internal.http import SseTiming, error_headers, identity_of, read_json, sse_frame, sse_stream
from internal.protocol.a2a.codec import a2a_v1, exact_json, proto3, swarm_envelope
from internal.protocol.a2a.codec.card import encode_card_v1
from internal.protocol.a2a.model import (
    PROTOCOL_VERSION,
    VERSION_HEADER,
    ButlerError,
    TaskEvent,
    Unavailable,
    reply_message,
)
from internal.protocol.a2a.server._operations import A2AOperations, check_version, envelope_of

log = logging.getLogger("butler.a2a")
MEDIA_TYPE = "application/json"  # A2A 11.1; requests may also say application/a2a+json
_PREFIXES = ("/message:", "/tasks", "/extendedAgentCard")
def error_body(err: ButlerError) -> dict[str, Any]:
    return {"error": {
        "code": err.status,
        "status": err.spec.grpc,
        "message": err.message,
        "details": [a2a_v1.encode_error_info(err)],
    }}


def answer(data: Any, status: int = 200, headers: dict[str, str] | None = None
           ) -> web.Response:
    return web.Response(body=exact_json.dumps_bytes(data), status=status,
                        content_type=MEDIA_TYPE,
                        headers={VERSION_HEADER: PROTOCOL_VERSION, **(headers or {})})


class A2ARestBinding:
    def __init__(self, ops: A2AOperations, *, max_json_depth: int, body_seconds: float,
                 timing: SseTiming | None = None) -> None:
        self.ops = ops
        self.max_json_depth = max_json_depth
        self.body_seconds = body_seconds
        self.timing = timing or SseTiming()

    def routes(self) -> list[web.RouteDef]:
        push = "/tasks/{id}/pushNotificationConfigs"
        return [
            web.post("/message:send", self.send),
            web.post("/message:stream", self.send_stream),
            web.get("/tasks", self.list_tasks),
            web.post("/tasks/{id}:cancel", self.cancel),
            web.get("/tasks/{id}:subscribe", self.subscribe),
            web.post("/tasks/{id}:subscribe", self.subscribe),
            web.get("/tasks/{id}", self.get),
            web.post(push, self.create_push),
            web.get(push, self.list_push),
            web.get(push + "/{push_id}", self.get_push),
            web.delete(push + "/{push_id}", self.delete_push),
            web.get("/extendedAgentCard", self.card),
        ]

    def render_error(self, request: web.Request, err: ButlerError) -> web.Response | None:
        if not request.path.startswith(_PREFIXES):
            return None
        return answer(error_body(err), err.status, error_headers(err))

    def _check_version(self, request: web.Request) -> None:
        check_version(request.headers)

    async def _body(self, request: web.Request) -> dict[str, Any]:
        self._check_version(request)
        body = await read_json(request, max_depth=self.max_json_depth,
                               body_seconds=self.body_seconds)
        request_body = proto3.obj(body, "request body")
        self.ops.check_tenant(request_body)
        return request_body

    async def send(self, request: web.Request) -> web.Response:
        params = a2a_v1.decode_send_params(await self._body(request))
        task = await self.ops.send(identity_of(request), params,
                                   envelope_of(params, request.headers))
        reply = reply_message(task)
        body = {"message": a2a_v1.encode_message(reply)} if reply is not None else {
            "task": a2a_v1.encode_task(task, history_length=params.history_length)}
        return answer(body, headers=swarm_envelope.activated(request.headers))

    async def send_stream(self, request: web.Request) -> web.StreamResponse:
        params = a2a_v1.decode_send_params(await self._body(request))
        events = self.ops.send_stream(identity_of(request), params,
                                      envelope_of(params, request.headers))
        return await self._stream(request, events)

    async def subscribe(self, request: web.Request) -> web.StreamResponse:
        self._check_version(request)
        events = self.ops.subscribe(identity_of(request), request.match_info["id"])
        return await self._stream(request, events)

    async def _stream(self, request: web.Request,
                      events: AsyncIterator[TaskEvent]) -> web.StreamResponse:
        first = await anext(events)  # errors before the first event are plain answers

        async def frames() -> AsyncIterator[bytes]:
            try:
                async for event in events:
                    yield sse_frame(exact_json.dumps(a2a_v1.encode_event(event)))
            except ButlerError as err:
                yield sse_frame(exact_json.dumps(error_body(err)), "error")
            except Exception:
                log.exception("stream of %s failed", request.path)
                internal = Unavailable("internal_error", "internal error")
                yield sse_frame(exact_json.dumps(error_body(internal)), "error")
            finally:
                await events.aclose()  # type: ignore[attr-defined]

        return await sse_stream(request, sse_frame(exact_json.dumps(a2a_v1.encode_event(first))),
                                frames(), self.timing, {VERSION_HEADER: PROTOCOL_VERSION,
                                                        **swarm_envelope.activated(request.headers)})

    async def get(self, request: web.Request) -> web.Response:
        self._check_version(request)
        length = proto3.integer(request.query, "historyLength", "query")
        task = await self.ops.get(identity_of(request), request.match_info["id"])
        return answer(a2a_v1.encode_task(task, history_length=length))

    async def list_tasks(self, request: web.Request) -> web.Response:
        self._check_version(request)
        query = a2a_v1.decode_list_query(request.query)
        page = await self.ops.list_tasks(identity_of(request), query)
        return answer(a2a_v1.encode_page(page, query))

    async def cancel(self, request: web.Request) -> web.Response:
        self._check_version(request)
        task = await self.ops.cancel(identity_of(request), request.match_info["id"])
        return answer(a2a_v1.encode_task(task))

    async def card(self, request: web.Request) -> web.Response:
        self._check_version(request)
        return answer(encode_card_v1(self.ops.card(identity_of(request))))

    async def create_push(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        config = a2a_v1.decode_push_config(body, "request body", task_id=request.match_info["id"])
        created = await self.ops.create_push(identity_of(request), config)
        return answer(a2a_v1.encode_push_config(created))

    async def list_push(self, request: web.Request) -> web.Response:
        self._check_version(request)
        configs = await self.ops.list_push(identity_of(request), request.match_info["id"])
        return answer({"configs": [a2a_v1.encode_push_config(c) for c in configs],
                       "nextPageToken": ""})

    async def get_push(self, request: web.Request) -> web.Response:
        self._check_version(request)
        config = await self.ops.get_push(identity_of(request), request.match_info["id"],
                                         request.match_info["push_id"])
        return answer(a2a_v1.encode_push_config(config))

    async def delete_push(self, request: web.Request) -> web.Response:
        self._check_version(request)
        await self.ops.delete_push(identity_of(request), request.match_info["id"],
                                   request.match_info["push_id"])
        return answer({})
