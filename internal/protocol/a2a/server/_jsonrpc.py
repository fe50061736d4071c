"""The A2A JSON-RPC 2.0 endpoint over HTTP: one URL serving the 1.0 and the 0.3 methods.

JSON-RPC itself (the request object, ids, errors, the dialects) is ``JsonRpcDispatcher``;
this module is its HTTP carrier: reading the body, version negotiation on the
``A2A-Version`` header, SSE framing. Errors found while handling a request are JSON-RPC
error objects in an HTTP 200 answer; errors raised before the handler ran
(authentication, rate limits) keep their HTTP status and get a JSON-RPC body too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from internal.http import (
    SseTiming,
    error_headers,
    identity_of,
    json_response,
    read_body,
    sse_frame,
    sse_stream,
)
from internal.protocol.a2a.codec import exact_json, swarm_extension
from internal.protocol.a2a.model import (
    JSONRPC_PATH,
    VERSION_HEADER,
    ButlerError,
    RequestError,
)
from internal.protocol.a2a.server._jsonrpc_dispatch import JsonRpcDispatcher


@dataclass(frozen=True)
class JsonRpcLimits:
    body_seconds: float
    timing: SseTiming = field(default_factory=SseTiming)


class JsonRpcBinding:
    def __init__(self, dispatcher: JsonRpcDispatcher, limits: JsonRpcLimits) -> None:
        """``dispatcher``: the agent's one dispatcher, which other carriers (gRPC, stdio)
        share."""
        self.dispatcher = dispatcher
        self.limits = limits

    def routes(self) -> list[web.RouteDef]:
        # Clients that join a base URL and a path may add a trailing slash.
        return [web.post(JSONRPC_PATH, self.handle), web.post(JSONRPC_PATH + "/", self.handle)]

    def render_error(self, request: web.Request, err: ButlerError) -> web.Response | None:
        """Errors raised before ``handle`` ran (auth, limits, wrong HTTP method)."""
        if request.path.rstrip("/") != JSONRPC_PATH:
            return None
        answer = self.dispatcher.failure(err, request.headers)
        return json_response(answer.body, status=err.status, headers=error_headers(err))

    async def _read(self, request: web.Request) -> bytes:
        try:
            return await read_body(request, body_seconds=self.limits.body_seconds)
        except web.HTTPRequestEntityTooLarge:
            raise RequestError("payload_too_large", "request body too large") from None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            raw = await self._read(request)
        except ButlerError as err:
            answer = self.dispatcher.failure(err, request.headers)
        else:
            answer = await self.dispatcher.answer(raw, identity_of(request), request.headers)
        headers = {VERSION_HEADER: answer.dialect.version,
                   **swarm_extension.activated(request.headers)}
        if answer.rest is None:
            return json_response(answer.body, headers=headers)
        return await sse_stream(request, _frame(answer.body), _frames(answer.rest),
                                self.limits.timing, headers=headers)


def _frame(body: dict[str, Any]) -> bytes:
    return sse_frame(exact_json.dumps(body), "error" if "error" in body else None)


async def _frames(rest: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    try:
        async for body in rest:
            yield _frame(body)
    finally:
        await rest.aclose()  # type: ignore[attr-defined]
