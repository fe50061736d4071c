"""A2A over JSON-RPC 2.0: one URL serving the 1.0 and the 0.3 methods.

- ``JsonRpcDispatcher``: JSON-RPC itself, whatever carries it: a request's bytes to its
  answer. The request object, ids, errors and the choice of the A2A dialect live here
  once; the carriers (HTTP with SSE, ``JsonRpcBinding`` below; a line loop on stdio in
  ``butler/edges``) only move bytes.
- The dialects, one per A2A version: ``V1Dialect`` (the 1.0 methods, params and results
  in the 1.0 wire format; the gRPC binding runs it too) and ``V03Dialect``
  (``message/send``, ``tasks/get``... in 0.3 shapes). Each decodes the params, calls
  ``A2AOperations`` and encodes the result.
- ``JsonRpcBinding``: the HTTP carrier: reading the body, version negotiation on the
  ``A2A-Version`` header, SSE framing. Errors found while handling a request are
  JSON-RPC error objects in an HTTP 200 answer; errors raised before the handler ran
  (authentication, rate limits) keep their HTTP status and get a JSON-RPC body too.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from internal.http import (
    SseTiming,
    error_headers,
    hold_refusal,
    identity_of,
    json_response,
    read_body,
    sse_frame,
    sse_stream,
)
from internal.protocol.a2a.codec import a2a_v03, a2a_v1, exact_json, proto3, swarm_envelope
from internal.protocol.a2a.codec.card import encode_card_v03, encode_card_v1
from internal.protocol.a2a.model import (
    JSONRPC_PATH,
    LEGACY_VERSION,
    PROTOCOL_VERSION,
    VERSION_HEADER,
    ButlerError,
    Identity,
    RequestError,
    Unavailable,
    reply_message,
    requested_version,
    version_matches,
)
from internal.protocol.a2a.server._operations import A2AOperations, encoded_events, envelope_of

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


@dataclass
class Answer:
    """One answer, or a stream: ``body`` is then its first event and ``rest`` the others
    (each a whole JSON-RPC response with the request's id; a failure is the last one)."""

    dialect: Dialect
    body: dict[str, Any]
    rest: AsyncIterator[dict[str, Any]] | None = None
    # An error answer's ``Retry-After``: a carrier may hold it that long (not the error
    # itself, whose traceback keeps the request's frames).
    retry_after: float | None = None


def _invalid(message: str) -> RequestError:
    return RequestError("invalid_request", message)


class JsonRpcDispatcher:
    def __init__(self, dialects: list[Dialect], *, max_json_depth: int) -> None:
        self.dialects = dialects
        self.max_json_depth = max_json_depth
        self._default = next(d for d in dialects if d.version == PROTOCOL_VERSION)

    def by_version(self, headers: Mapping[str, str] | None) -> Dialect:
        """The dialect a request asks for before its method is known (its errors' shape)."""
        return self._matching(headers) or self._default

    def _matching(self, headers: Mapping[str, str] | None) -> Dialect | None:
        wanted = PROTOCOL_VERSION if headers is None else requested_version(headers)
        for dialect in self.dialects:
            if version_matches(wanted, dialect.version):
                return dialect
        return None

    def failure(self, err: ButlerError, headers: Mapping[str, str] | None,
                request_id: str | int | None = None) -> Answer:
        """The answer to a request that could not be read (too large, too slow)."""
        dialect = self.by_version(headers)
        return Answer(dialect, _error(request_id, dialect, err))

    def _dialect(self, method: str) -> Dialect:
        dialect = next((d for d in self.dialects if method in d.methods), None)
        if dialect is None:
            raise RequestError("method_not_found", f"method {method!r} not found")
        return dialect

    @staticmethod
    def _check_version(method: str, dialect: Dialect, headers: Mapping[str, str]) -> None:
        asked = requested_version(headers)
        if not version_matches(asked, dialect.version):
            raise RequestError(
                "version_not_supported",
                f"{method} is an A2A {dialect.version} method but the request asks for "
                f"A2A-Version {asked!r}" + ("" if headers.get(VERSION_HEADER) else
                                            " (no A2A-Version header means 0.3)"))

    async def answer(self, raw: bytes, caller: Identity,
                     headers: Mapping[str, str] | None) -> Answer:
        """``headers``: the transport's, whose ``A2A-Version`` must match the method's
        version; ``None`` for a carrier without headers (stdio), where the method's name
        alone says its version."""
        request_id: str | int | None = None
        matched = self._matching(headers)
        dialect = matched or self._default
        try:
            if not raw.strip():
                raise RequestError("malformed_json", "request is empty; expected JSON-RPC")
            body = exact_json.loads(raw, max_depth=self.max_json_depth)
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
            # The negotiated dialect's own methods need no second look at the version.
            if headers is None or matched is None or method not in matched.methods:
                dialect = self._dialect(method)
                if headers is not None:
                    self._check_version(method, dialect, headers)
            params = body.get("params", {})
            if not isinstance(params, dict):
                raise RequestError("invalid_params", "params must be an object (by name)")
            result = await dialect.call(method, caller, params, headers or {})
            if method in dialect.streaming:
                first = await anext(result)  # errors before the first event are plain answers
                return Answer(dialect, _result(request_id, first),
                              _rest(method, request_id, dialect, result))
        except ButlerError as err:
            return Answer(dialect, _error(request_id, dialect, err), retry_after=err.retry_after)
        except Exception:  # a bug: every carrier still answers this id, with no traceback
            log.exception("JSON-RPC request failed")
            return Answer(dialect, _error(request_id, dialect, _INTERNAL))
        return Answer(dialect, _result(request_id, result))


_INTERNAL = Unavailable("internal_error", "internal error")


def _result(request_id: str | int | None, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _error(request_id: str | int | None, dialect: Dialect, err: ButlerError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": dialect.error(err)}


async def _rest(method: str, request_id: str | int | None, dialect: Dialect,
                results: AsyncIterator[Any]) -> AsyncIterator[dict[str, Any]]:
    try:
        async for result in results:
            yield _result(request_id, result)
    except ButlerError as err:
        yield _error(request_id, dialect, err)
    except Exception:
        log.exception("stream of %s failed", method)
        yield _error(request_id, dialect, _INTERNAL)
    finally:
        await results.aclose()  # type: ignore[attr-defined]


# -- the A2A 1.0 dialect ------------------------------------------------------------------

PUSH_METHODS = ("CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
                "ListTaskPushNotificationConfigs", "ListTaskPushNotificationConfig",
                "DeleteTaskPushNotificationConfig")


class V1Dialect:
    version = PROTOCOL_VERSION
    methods = frozenset({
        "SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask",
        "SubscribeToTask", "GetExtendedAgentCard", *PUSH_METHODS,
    })
    streaming = frozenset({"SendStreamingMessage", "SubscribeToTask"})

    def __init__(self, ops: A2AOperations) -> None:
        self.ops = ops

    def error(self, err: ButlerError) -> dict[str, Any]:
        return {"code": err.rpc_code, "message": err.message,
                "data": [a2a_v1.encode_error_info(err)]}

    async def call(self, method: str, caller: Identity, params: dict[str, Any],
                   headers: Mapping[str, str]) -> Any:
        ops = self.ops
        ops.check_tenant(params)
        if method in ("SendMessage", "SendStreamingMessage"):
            send = a2a_v1.decode_send_params(params)
            envelope = envelope_of(send, headers)
            if method == "SendStreamingMessage":
                return encoded_events(a2a_v1.encode_event, ops.send_stream(caller, send, envelope))
            task = await ops.send(caller, send, envelope)
            if (reply := reply_message(task)) is not None:
                return {"message": a2a_v1.encode_message(reply)}
            return {"task": a2a_v1.encode_task(task, history_length=send.history_length)}
        if method == "GetTask":
            task = await ops.get(caller, _id(params, "id"))
            length = proto3.integer(params, "historyLength", "params")
            return a2a_v1.encode_task(task, history_length=length)
        if method == "ListTasks":
            query = a2a_v1.decode_list_query(params)
            return a2a_v1.encode_page(await ops.list_tasks(caller, query), query)
        if method == "CancelTask":
            return a2a_v1.encode_task(await ops.cancel(caller, _id(params, "id")))
        if method == "SubscribeToTask":
            return encoded_events(a2a_v1.encode_event, ops.subscribe(caller, _id(params, "id")))
        if method == "GetExtendedAgentCard":  # a 1.0 method: the 1.0 card alone
            return encode_card_v1(ops.card(caller))
        return await self._push(method, caller, params)

    async def _push(self, method: str, caller: Identity, params: dict[str, Any]) -> Any:
        task_id = _id(params, "taskId")
        if method == "CreateTaskPushNotificationConfig":
            config = a2a_v1.decode_push_config(params, "params", task_id=task_id)
            return a2a_v1.encode_push_config(await self.ops.create_push(caller, config))
        if method.startswith("List"):
            configs = await self.ops.list_push(caller, task_id)
            return {"configs": [a2a_v1.encode_push_config(c) for c in configs],
                    "nextPageToken": ""}
        config_id = _id(params, "id")
        if method == "GetTaskPushNotificationConfig":
            return a2a_v1.encode_push_config(await self.ops.get_push(caller, task_id, config_id))
        await self.ops.delete_push(caller, task_id, config_id)
        return None


def _id(params: Mapping[str, Any], name: str) -> str:
    return proto3.string(params, name, "params", required=True, max_len=256)


# -- the A2A 0.3 dialect ------------------------------------------------------------------

_PUSH = "tasks/pushNotificationConfig/"
# Codes 0.3 defines; newer A2A codes become -32603 for a 0.3 client, as the SDK does.
_V03_CODES = frozenset({-32700, -32600, -32601, -32602, -32603, -32001, -32002, -32003,
                        -32004, -32005, -32006, -32007})


class V03Dialect:
    version = LEGACY_VERSION
    methods = frozenset({
        "message/send", "message/stream", "tasks/get", "tasks/cancel", "tasks/resubscribe",
        _PUSH + "set", _PUSH + "get", _PUSH + "list", _PUSH + "delete",
        "agent/getAuthenticatedExtendedCard",
    })
    streaming = frozenset({"message/stream", "tasks/resubscribe"})

    def __init__(self, ops: A2AOperations) -> None:
        self.ops = ops

    def error(self, err: ButlerError) -> dict[str, Any]:
        code = err.rpc_code
        if -32099 <= code <= -32000 and code not in _V03_CODES:
            code = -32603
        return {"code": code, "message": err.message, "data": {"code": err.code, **err.details}}

    async def call(self, method: str, caller: Identity, params: dict[str, Any],
                   headers: Mapping[str, str]) -> Any:
        ops = self.ops
        if method in ("message/send", "message/stream"):
            send = a2a_v03.decode_send_params(params)
            envelope = envelope_of(send, headers)
            if method == "message/stream":
                return encoded_events(a2a_v03.encode_event, ops.send_stream(caller, send, envelope))
            task = await ops.send(caller, send, envelope)
            if (reply := reply_message(task)) is not None:
                return a2a_v03.encode_message(reply)
            return a2a_v03.encode_task(task, history_length=send.history_length)
        if method == "agent/getAuthenticatedExtendedCard":
            return encode_card_v03(ops.card(caller))
        task_id = proto3.string(params, "id", "params", required=True, max_len=256) \
            if not method.endswith("/set") else ""
        if method == "tasks/get":
            length = proto3.integer(params, "historyLength", "params")
            return a2a_v03.encode_task(await ops.get(caller, task_id),
                                       history_length=length or None)
        if method == "tasks/cancel":
            return a2a_v03.encode_task(await ops.cancel(caller, task_id))
        if method == "tasks/resubscribe":
            return encoded_events(a2a_v03.encode_event, ops.subscribe(caller, task_id))
        return await self._push(method, caller, task_id, params)

    async def _push(self, method: str, caller: Identity, task_id: str,
                    params: dict[str, Any]) -> Any:
        if method.endswith("/set"):
            config = a2a_v03.decode_task_push_config(params)
            return a2a_v03.encode_push_config(await self.ops.create_push(caller, config))
        if method.endswith("/list"):
            return [a2a_v03.encode_push_config(c)
                    for c in await self.ops.list_push(caller, task_id)]
        config_id = proto3.string(params, "pushNotificationConfigId", "params", max_len=128)
        if method.endswith("/get"):
            if not config_id:  # 0.3 allowed asking for "the" config of a task
                configs = await self.ops.list_push(caller, task_id)
                if not configs:
                    raise RequestError("task_not_found",
                                       f"task {task_id} has no push notification config")
                return a2a_v03.encode_push_config(configs[0])
            return a2a_v03.encode_push_config(await self.ops.get_push(caller, task_id,
                                                                      config_id))
        if not config_id:
            raise proto3.bad("params.pushNotificationConfigId is required")
        await self.ops.delete_push(caller, task_id, config_id)
        return None


# -- the HTTP carrier ---------------------------------------------------------------------

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
                   **swarm_envelope.activated(request.headers)}
        if answer.rest is None:
            await hold_refusal(request, answer.retry_after)
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
