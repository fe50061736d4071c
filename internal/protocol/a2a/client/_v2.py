"""Butler's /v2 REST binding as a transport, over aiohttp: ``A2AClient``'s transport for a
Butler peer (``send``, ``task``), and the /v2 API itself (submit, get, cancel, answer, list,
events, card) for the commands that stream or run concurrently. The rules of each
exchange are ``PeerExchange``'s; ``BlockingV2Transport`` drives the same rules over
``http.client``.

Transport problems are translated in one place (``transport_errors``) into
``DelegationFailed``; a peer's own JSON error comes back as the same error class it was
raised as there, so callers can tell a refusal (never retried) from an unreachable peer
(try another).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import aiohttp

from internal.http import ConnectionCheck, OutboundGuard, read_capped, sse_events
from internal.protocol.a2a.client._exchange import (
    MAX_RESPONSE_BYTES,
    PeerExchange,
    connect_failure,
    describe,
    mapped_errors,
    not_accepted,
    quoted,
)
from internal.protocol.a2a.codec import butler_v2, swarm_envelope
from internal.protocol.a2a.model import (
    Artifact,
    ButlerError,
    DelegationFailed,
    Task,
    TaskRequest,
)

if TYPE_CHECKING:
    from internal.protocol.a2a.client._message import Outgoing


class V2Transport:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        session: aiohttp.ClientSession,
        connect_timeout: float = 3.0,
        timeout: float = 60.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        name: str = "",
        tls: ssl.SSLContext | None = None,
        guard: OutboundGuard | None = None,
        check: ConnectionCheck | None = None,
    ) -> None:
        """``session``: normally one from ``internal.http.outbound_session`` (guarded, tuned).
        ``tls``: a context trusting a pinned CA; None verifies against the system's.
        ``guard``: the session's guard, to refuse what aiohttp would quietly rewrite
        before the session sees it (credentials in the URL become a Basic header).
        ``check``: awaited before each new connection (the session's ``connection_checks``)."""
        self._x = PeerExchange(base_url, token, timeout=timeout,
                               max_response_bytes=max_response_bytes, name=name, guard=guard)
        self.base_url = self._x.base_url
        self.name = self._x.name
        self._session = session
        self._tls: ssl.SSLContext | bool = tls if tls is not None else True
        self._check = check
        # aiohttp's own total stays off: ``request`` bounds the whole exchange itself.
        self._client_timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)

    def __repr__(self) -> str:
        return f"V2Transport({self.base_url!r})"

    def _mapped(self, timeout: float) -> contextlib.AbstractContextManager[None]:
        return transport_errors(self.name, timeout)

    async def request(
        self, method: str, path: str, *, body: Any = None,
        headers: Mapping[str, str] | None = None, timeout: float | None = None,
    ) -> Any:
        total = self._x.total(timeout)
        with self._mapped(total):
            call = self._x.prepare(method, path, body=body, headers=headers)
            async with asyncio.timeout(total), self._session.request(
                call.method, call.url, data=call.data, headers=call.headers,
                allow_redirects=False, ssl=self._tls, timeout=self._client_timeout,
                trace_request_ctx=self._check,
            ) as resp:
                return self._x.decode(resp.status, await self._read_capped(resp))

    async def _read_capped(self, resp: aiohttp.ClientResponse) -> bytes:
        return await read_capped(resp.content.iter_chunked(65536), self._x.max,
                                 announced=resp.content_length)

    async def card(self) -> dict[str, Any]:
        data = await self.request("GET", "/v2/card")
        if not isinstance(data, dict):
            raise DelegationFailed("peer_error", f"{self.name} card is not an object")
        return data

    async def submit(
        self, request: TaskRequest, *, chain: tuple[str, ...] = (),
        budget: Decimal | None = None, headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Task:
        body = butler_v2.encode_request(request, chain=chain, budget=budget)
        extra = dict(headers or {})
        if chain:
            extra[swarm_envelope.CHAIN_HEADER] = ",".join(chain)
            extra[swarm_envelope.DEPTH_HEADER] = str(len(chain))
        data = await self.request("POST", "/v2/tasks", body=body, headers=extra, timeout=timeout)
        return self._x.task(data)

    async def send(self, message: Outgoing, deadline: float) -> Task:
        """``A2AClient``'s send: the task submitted (or, a follow-up, the answer to the
        peer's task that waits on it) to block until it ends or waits again."""
        request = replace(message.request, blocking=True)
        timeout = deadline - time.monotonic()
        if not message.task_id:
            return await self.submit(request, chain=message.chain, budget=message.budget,
                                     headers=message.headers, timeout=timeout)
        body = butler_v2.encode_request(request, chain=message.chain, budget=message.budget)
        path = f"/v2/tasks/{quoted(message.task_id)}/input"
        return self._x.task(await self.request("POST", path, body=body,
                                               headers=message.headers, timeout=timeout))

    def decode(self, data: Any) -> Task:
        """A task as an event (or an answer) carries it."""
        return self._x.task(data)

    def artifact_event(self, data: Any) -> tuple[Artifact, bool, bool]:
        """An ``artifact`` event's artifact chunk: (artifact, append, last chunk)."""
        try:
            item = data if isinstance(data, dict) else {}
            artifact = butler_v2.decode_artifact(item.get("artifact"))
        except ButlerError as err:
            raise DelegationFailed("peer_error", f"{self.name} sent an invalid artifact: "
                                                 f"{err.message}") from None
        return artifact, item.get("append") is True, item.get("last_chunk") is not False

    async def task(self, task_id: str, message: Outgoing, deadline: float) -> Task:
        return await self.get(task_id, timeout=deadline - time.monotonic())

    async def get(self, task_id: str, *, timeout: float | None = None) -> Task:
        path = f"/v2/tasks/{quoted(task_id)}"
        return self._x.task(await self.request("GET", path, timeout=timeout))

    async def cancel(self, task_id: str, message: Outgoing | None = None,
                     deadline: float | None = None) -> Task:
        """``message``: the call whose task this is (its trace headers go with the cancel);
        ``deadline``: the monotonic time the cancel must be answered by."""
        timeout = None if deadline is None else deadline - time.monotonic()
        return self._x.task(await self.request(
            "POST", f"/v2/tasks/{quoted(task_id)}/cancel", timeout=timeout,
            headers=None if message is None else message.headers))

    async def answer(self, task_id: str, text: str, *, input: dict[str, Any] | None = None,
                     blocking: bool = True) -> Task:
        body = butler_v2.encode_request(TaskRequest(text=text, input=input or {},
                                                     blocking=blocking))
        path = f"/v2/tasks/{quoted(task_id)}/input"
        return self._x.task(await self.request("POST", path, body=body))

    async def list_tasks(self, *, state: str | None = None, cursor: str | None = None,
                         limit: int = 50) -> dict[str, Any]:
        query = f"?limit={limit}" + (f"&state={state}" if state else "") + (
            f"&cursor={cursor}" if cursor else "")
        data = await self.request("GET", "/v2/tasks" + query)
        if not isinstance(data, dict):
            raise DelegationFailed("peer_error", f"{self.name} sent an invalid task list")
        return data

    async def events(self, task_id: str) -> AsyncIterator[tuple[str, Any]]:
        """Server-sent events of a task: (event name, decoded data) until the stream ends."""
        with self._mapped(self._x.timeout):
            async with self._session.get(
                self._x.url(f"/v2/tasks/{quoted(task_id)}/events"), headers=self._x.headers(),
                allow_redirects=False, ssl=self._tls, timeout=self._client_timeout,
                trace_request_ctx=self._check,
            ) as resp:
                if resp.status != 200:
                    self._x.decode(resp.status, await self._read_capped(resp))
                async for event in sse_events(resp.content.iter_any(), self._x.max):
                    yield self._x.event(event)


def transport_errors(name: str, timeout: float) -> contextlib.AbstractContextManager[None]:
    """Every failure of an aiohttp exchange with a peer, as one ``DelegationFailed`` code."""
    return mapped_errors(name, timeout, _aiohttp_failure)


def _aiohttp_failure(name: str, exc: Exception, took: float) -> DelegationFailed | None:
    """aiohttp's own exceptions; the socket errors and TLS failures they wrap are said the
    way any transport's are (``connect_failure``)."""
    if isinstance(exc, aiohttp.NonHttpUrlClientError):
        return DelegationFailed("peer_address_refused", f"{name}: the URL is not http or https")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return DelegationFailed("peer_tls_error",
                                f"{name}: certificate not trusted: {exc.certificate_error}")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):  # no answer to connecting at all
        return not_accepted(name, took)
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return DelegationFailed("peer_unreachable", f"cannot connect to {name}: its host name "
                                                    f"does not resolve ({exc.os_error})")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return connect_failure(name, exc.os_error, took)
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return DelegationFailed("peer_timeout", f"{name} stopped sending for {took:.1f} s")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return DelegationFailed("peer_error", f"{name} closed the connection without "
                                              "answering")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return DelegationFailed("peer_error", f"{name}: its answer broke off ({describe(exc)})")
    if isinstance(exc, aiohttp.ClientOSError):
        return connect_failure(name, exc, took)
    if isinstance(exc, aiohttp.ClientError):
        return DelegationFailed("peer_error", f"{name}: {describe(exc)}")
    return None
