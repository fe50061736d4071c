"""The two HTTP bindings of A2A as transports of ``A2AClient``: JSON-RPC (1.0 and 0.3) and
HTTP+JSON (1.0), over a session from ``internal.http.outbound_session``.

Each sends a task, reads one back and streams one (``stream`` yields the stream's
results as they come, or the whole ``Task`` when the agent answered without a stream).
Both bound an answer by the one size cap and read a stream with the one SSE reader
(``internal.http``); a redirect is an answer, never followed; the token goes only with
the requests the transport was built for, each carrying the new-connection check it was
given (``check``)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp

from internal.http import ConnectionCheck, OutboundGuard, read_capped, sse_events
from internal.protocol.a2a.client._message import (
    Outgoing,
    a2a_headers,
    a2a_params,
    task_of,
)
from internal.protocol.a2a.client._v2 import transport_errors
from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.codec.peer_answers import bad_answer, peer_error
from internal.protocol.a2a.model import PROTOCOL_VERSION, ButlerError, DelegationFailed, Task

_CHUNK = 65536
_RPC_METHODS = {"send": ("SendMessage", "message/send"),
                "stream": ("SendStreamingMessage", "message/stream"),
                "get": ("GetTask", "tasks/get"),
                "cancel": ("CancelTask", "tasks/cancel")}


class HttpRequests:
    """One peer over one aiohttp session: a JSON request and its capped, decoded answer.
    ``token``: none, no header (``butler card`` reads public cards without one)."""

    def __init__(self, token: str, *, session: aiohttp.ClientSession, name: str,
                 connect_timeout: float, timeout: float, max_response_bytes: int,
                 tls: ssl.SSLContext | None, guard: OutboundGuard | None,
                 check: ConnectionCheck | None) -> None:
        self.name = name
        self.max = max_response_bytes
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        self._session = session
        self._tls: ssl.SSLContext | bool = tls if tls is not None else True
        self._guard = guard
        self._check = check
        self.timeout = timeout
        # aiohttp's own total stays off: each exchange is bounded as a whole by ``left``.
        self._client_timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)

    def left(self, deadline: float) -> float:
        """Seconds one request may take: to the deadline, within the client's timeout."""
        left = min(deadline - time.monotonic(), self.timeout)
        if left <= 0:
            raise DelegationFailed("peer_timeout", f"{self.name} did not finish in time")
        return left

    def mapped(self, timeout: float) -> contextlib.AbstractContextManager[None]:
        return transport_errors(self.name, timeout)

    @contextlib.asynccontextmanager
    async def open(self, method: str, url: str, *, body: Any, headers: Mapping[str, str],
                   ) -> AsyncIterator[aiohttp.ClientResponse]:
        if self._guard is not None:
            self._guard.check_target(url)
        hdrs = {**self._auth, **headers}
        data = None if body is None else exact_json.dumps_bytes(body)
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        async with self._session.request(
            method, url, data=data, headers=hdrs, allow_redirects=False, ssl=self._tls,
            timeout=self._client_timeout, trace_request_ctx=self._check,
        ) as resp:
            if 300 <= resp.status < 400:
                raise DelegationFailed("peer_error", f"{self.name} redirected (not followed)")
            yield resp

    async def json(self, resp: aiohttp.ClientResponse) -> Any:
        raw = await read_capped(resp.content.iter_chunked(_CHUNK), self.max,
                                announced=resp.content_length)
        try:
            return exact_json.loads(raw, max_depth=128)
        except ButlerError:
            raise bad_answer(self.name, f"HTTP {resp.status} without JSON") from None

    async def call(self, method: str, url: str, body: Any, headers: Mapping[str, str],
                   deadline: float) -> tuple[int, Any]:
        left = self.left(deadline)
        with self.mapped(left):
            async with asyncio.timeout(left), self.open(method, url, body=body,
                                                        headers=headers) as resp:
                return resp.status, await self.json(resp)

    async def events(self, url: str, body: Any, headers: Mapping[str, str], deadline: float,
                     ) -> AsyncGenerator[tuple[str, Any] | int]:
        """A stream's events as (name, decoded data); or, when the answer is no stream,
        its status and then its decoded body. Bounded by the deadline alone: a stream
        lasts as long as its task."""
        left = max(deadline - time.monotonic(), 0.001)
        with self.mapped(left):
            async with asyncio.timeout(left), self.open(
                    "POST", url, body=body,
                    headers={**headers, "Accept": "text/event-stream"}) as resp:
                if resp.content_type != "text/event-stream":
                    yield resp.status
                    yield await self.json(resp)
                    return
                async for event in sse_events(resp.content.iter_any(), self.max):
                    try:
                        yield event.event, exact_json.loads(event.data, max_depth=128)
                    except ButlerError:
                        raise bad_answer(self.name, "an event that is not JSON") from None


class _HttpTransport:
    """What both HTTP bindings do with a request once it is made (``_request``) and with
    what comes back (``_result``)."""

    # A stream's ``error`` event is the error itself (JSON-RPC's is a response to unwrap).
    error_events = False

    def __init__(self, url: str, version: str, http: HttpRequests) -> None:
        self.url = url
        self.version = version
        self.name = http.name
        self._http = http

    def _request(self, op: str, params: dict[str, Any]) -> tuple[str, str, Any]:
        raise NotImplementedError

    def _result(self, status: int, data: Any) -> Any:
        raise NotImplementedError

    async def _task(self, op: str, params: dict[str, Any], message: Outgoing,
                    deadline: float) -> Task:
        method, url, body = self._request(op, params)
        status, data = await self._http.call(method, url, body,
                                             a2a_headers(message, self.version), deadline)
        return task_of(self._result(status, data), self.version, self.name)

    async def send(self, message: Outgoing, deadline: float) -> Task:
        return await self._task("send", a2a_params(message, self.version), message, deadline)

    async def task(self, task_id: str, message: Outgoing, deadline: float) -> Task:
        return await self._task("get", {"id": task_id}, message, deadline)

    async def cancel(self, task_id: str, message: Outgoing, deadline: float) -> Task:
        return await self._task("cancel", {"id": task_id}, message, deadline)

    async def stream(self, message: Outgoing, deadline: float) -> AsyncIterator[Any]:
        _, url, body = self._request("stream", a2a_params(message, self.version))
        events = self._http.events(url, body, a2a_headers(message, self.version), deadline)
        async with contextlib.aclosing(events):
            async for item in events:
                if isinstance(item, int):  # no stream: the whole answer
                    yield task_of(self._result(item, await anext(events)), self.version,
                                  self.name)
                    return
                name, data = item
                if name == "error" and self.error_events:
                    raise peer_error(self.name, _dict(data).get("error"))
                yield self._result(200, data)


class JsonRpcTransport(_HttpTransport):
    def _request(self, op: str, params: dict[str, Any]) -> tuple[str, str, Any]:
        names = _RPC_METHODS[op]
        method = names[0] if self.version == PROTOCOL_VERSION else names[1]
        return "POST", self.url, {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method,
                                  "params": params}

    def _result(self, status: int, data: Any) -> Any:
        if not isinstance(data, dict):
            raise bad_answer(self.name, "not a JSON-RPC response")
        if "error" in data:
            raise peer_error(self.name, data["error"])
        if status != 200 or "result" not in data:
            raise bad_answer(self.name, f"HTTP {status} without a JSON-RPC result")
        return data["result"]


class HttpJsonTransport(_HttpTransport):
    error_events = True

    def _request(self, op: str, params: dict[str, Any]) -> tuple[str, str, Any]:
        if op == "get":
            return "GET", f"{self.url}/tasks/{quote(params['id'], safe='')}", None
        if op == "cancel":
            return "POST", f"{self.url}/tasks/{quote(params['id'], safe='')}:cancel", {}
        return "POST", f"{self.url}/message:{op}", params

    def _result(self, status: int, data: Any) -> Any:
        if status >= 400 or (isinstance(data, dict) and "error" in data and status != 200):
            raise peer_error(self.name, _dict(data).get("error"))
        return data


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
