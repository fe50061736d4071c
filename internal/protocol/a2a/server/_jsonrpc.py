"""The A2A JSON-RPC 2.0 endpoint: one URL serving the 1.0 and the 0.3 methods.

This module is JSON-RPC itself (the request object, ids, errors, version
negotiation, SSE framing); a ``Dialect`` per A2A version decodes the params, calls
``A2AOperations`` and encodes the result. Errors found while handling a request are
JSON-RPC error objects in an HTTP 200 answer; errors raised before the handler ran
(authentication, rate limits) keep their HTTP status and get a JSON-RPC body too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from internal.http import (
    SseTiming,
    error_headers,
    identity_of,
    json_response,
    sse_frame,
    sse_stream,
)
from internal.protocol.a2a.codec import exact_json, swarm_extension
from internal.protocol.a2a.model import (
    JSONRPC_PATH,
    PROTOCOL_VERSION,
    VERSION_HEADER,
    ButlerError,
    Identity,
    RequestError,
    Unavailable,
    requested_version,
    version_matches,
)

log = logging.getLogger("butler.a2a")

Result = Any  # the JSON ``result``, or an async iterator of results for a stream


class Dialect(Protocol):
    version: str
    methods: frozenset[str]
    streaming: frozenset[str]

    async def call(self, method: str, caller: Identity, params: dict[str, Any],
                   headers: Mapping[str, str]) -> Result: ...

    def error(self, err: ButlerError) -> dict[str, Any]:
        """The JSON-RPC error object for ``err`` in this version's shape."""


@dataclass(frozen=True)
class JsonRpcLimits:
    max_json_depth: int
    body_seconds: float
    timing: SseTiming = field(default_factory=SseTiming)


def _invalid(message: str) -> RequestError:
    return RequestError("invalid_request", message)


class JsonRpcBinding:
    def __init__(self, dialects: list[Dialect], limits: JsonRpcLimits) -> None:
        self.dialects = dialects
        self.limits = limits

    def routes(self) -> list[web.RouteDef]:
        # Clients that join a base URL and a path may add a trailing slash.
        return [web.post(JSONRPC_PATH, self.handle), web.post(JSONRPC_PATH + "/", self.handle)]

    def _by_version(self, headers: Mapping[str, str]) -> Dialect:
        wanted = requested_version(headers)
        for dialect in self.dialects:
            if version_matches(wanted, dialect.version):
                return dialect
        return next(d for d in self.dialects if d.version == PROTOCOL_VERSION)

    def render_error(self, request: web.Request, err: ButlerError) -> web.Response | None:
        """Errors raised before ``handle`` ran (auth, limits, wrong HTTP method)."""
        if request.path.rstrip("/") != JSONRPC_PATH:
            return None
        body = {"jsonrpc": "2.0", "id": None, "error": self._by_version(request.headers).error(err)}
        return json_response(body, status=err.status, headers=error_headers(err))

    async def _read(self, request: web.Request) -> Any:
        try:
            async with asyncio.timeout(self.limits.body_seconds):
                raw = await request.read()
        except TimeoutError:
            raise RequestError("request_timeout", "request body not received within "
                               f"{self.limits.body_seconds:g}s") from None
        except web.HTTPRequestEntityTooLarge:
            raise RequestError("payload_too_large", "request body too large") from None
        if not raw.strip():
            raise RequestError("malformed_json", "request body is empty; expected JSON-RPC")
        return exact_json.loads(raw, max_depth=self.limits.max_json_depth)

    def _dialect(self, method: str) -> Dialect:
        dialect = next((d for d in self.dialects if method in d.methods), None)
        if dialect is None:
            raise RequestError("method_not_found", f"method {method!r} not found")
        return dialect

    def _check_version(self, method: str, dialect: Dialect, headers: Mapping[str, str]) -> None:
        asked = requested_version(headers)
        if not version_matches(asked, dialect.version):
            raise RequestError(
                "version_not_supported",
                f"{method} is an A2A {dialect.version} method but the request asks for "
                f"A2A-Version {asked!r}" + ("" if headers.get(VERSION_HEADER) else
                                            " (no A2A-Version header means 0.3)"))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        request_id: str | int | None = None
        dialect = self._by_version(request.headers)
        try:
            body = await self._read(request)
            if isinstance(body, list):
                raise _invalid("batch requests are not supported")
            if not isinstance(body, dict):
                raise _invalid("a JSON-RPC request must be an object")
            raw_id = body.get("id")
            if isinstance(raw_id, str | int) and not isinstance(raw_id, bool):
                request_id = raw_id
            if body.get("jsonrpc") != "2.0":
                raise _invalid('"jsonrpc" must be exactly "2.0"')
            if "id" not in body:
                raise _invalid("id is required: A2A does not use JSON-RPC notifications")
            if raw_id is not None and request_id is None:
                raise _invalid("id must be a string, an integer or null")
            method = body.get("method")
            if not isinstance(method, str) or not method:
                raise _invalid("method must be a non-empty string")
            # From here on, errors take the shape of the method's version (as the SDK does:
            # a 0.3 method's version error is -32603, which 0.3 clients know).
            dialect = self._dialect(method)
            self._check_version(method, dialect, request.headers)
            params = body.get("params", {})
            if not isinstance(params, dict):
                raise RequestError("invalid_params", "params must be an object (by name)")
            result = await dialect.call(method, identity_of(request), params, request.headers)
            if method in dialect.streaming:
                return await self._stream(request, request_id, dialect, result)
        except ButlerError as err:
            return self._answer(request, {"jsonrpc": "2.0", "id": request_id,
                                          "error": dialect.error(err)}, dialect)
        return self._answer(request, {"jsonrpc": "2.0", "id": request_id, "result": result},
                            dialect)

    def _answer(self, request: web.Request, body: dict[str, Any],
                dialect: Dialect) -> web.Response:
        return json_response(body, headers={VERSION_HEADER: dialect.version,
                                            **swarm_extension.activated(request.headers)})

    async def _stream(self, request: web.Request, request_id: str | int | None,
                      dialect: Dialect, results: AsyncIterator[Any]) -> web.StreamResponse:
        first = await anext(results)  # errors before the first event are plain answers

        def encode(result: Any) -> bytes:
            return sse_frame(exact_json.dumps({"jsonrpc": "2.0", "id": request_id,
                                             "result": result}))

        async def frames() -> AsyncIterator[bytes]:
            try:
                async for result in results:
                    yield encode(result)
            except ButlerError as err:
                yield sse_frame(exact_json.dumps({"jsonrpc": "2.0", "id": request_id,
                                                "error": dialect.error(err)}), "error")
            except Exception:
                log.exception("stream of %s failed", request.path)
                internal = Unavailable("internal_error", "internal error")
                yield sse_frame(exact_json.dumps({"jsonrpc": "2.0", "id": request_id,
                                                "error": dialect.error(internal)}), "error")
            finally:
                await results.aclose()  # type: ignore[attr-defined]

        return await sse_stream(request, encode(first), frames(), self.limits.timing,
                                headers={VERSION_HEADER: dialect.version,
                                         **swarm_extension.activated(request.headers)})


