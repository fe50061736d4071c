"""Outbound client for a peer's /v2 REST binding (``a2a.delegate`` and the CLI).

Transport problems are translated here, in one place, into ``DelegationFailed``; a
peer's own JSON error comes back as the same error class it was raised as there, so
callers can tell a refusal (never retried) from an unreachable peer (try another).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import aiohttp

from internal.http import OutboundGuard
from internal.protocol.a2a.codec import butler_v2, envelope, exact_json
from internal.protocol.a2a.model import (
    ButlerError,
    DelegationFailed,
    OutboundRefused,
    Task,
    TaskRequest,
    error_from_code,
)


class PeerClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        session: aiohttp.ClientSession,
        connect_timeout: float = 3.0,
        timeout: float = 60.0,
        max_response_bytes: int = 4 * 1024 * 1024,
        name: str = "",
        tls: ssl.SSLContext | None = None,
        guard: OutboundGuard | None = None,
    ) -> None:
        """``session``: normally one from ``internal.http.outbound_session`` (guarded, tuned).
        ``tls``: a context trusting a pinned CA; None verifies against the system's.
        ``guard``: the session's guard, to refuse what aiohttp would quietly rewrite
        before the session sees it (credentials in the URL become a Basic header)."""
        self.base_url = base_url.rstrip("/")
        self.name = name or self.base_url
        self._session = session
        self._timeout = timeout
        self._max = max_response_bytes
        self._tls: ssl.SSLContext | bool = tls if tls is not None else True
        self._guard = guard
        self._base_checked = False  # the guard has seen this base URL (see ``_url``)
        # aiohttp's own total stays off: ``request`` bounds the whole exchange itself.
        self._client_timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)
        self._base_headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}

    def __repr__(self) -> str:
        return f"PeerClient({self.base_url!r})"

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = self._base_headers.copy()
        if extra:
            headers.update(extra)
        return headers

    def _mapped(self, timeout: float) -> contextlib.AbstractContextManager[None]:
        return transport_errors(self.name, timeout)

    def _url(self, path: str) -> str:
        """Paths are the client's own (ids quoted), so they cannot change the scheme, host
        or credentials: the base URL is judged here once, before aiohttp first sees it.
        The session's guard still judges every request and every connection."""
        url = self.base_url + path
        if self._guard is not None and not self._base_checked:
            self._guard.check_target(url)
            self._base_checked = True
        return url

    async def request(
        self, method: str, path: str, *, body: Any = None,
        headers: Mapping[str, str] | None = None, timeout: float | None = None,
    ) -> Any:
        total = min(timeout, self._timeout) if timeout is not None else self._timeout
        total = max(total, 0.001)
        data = exact_json.dumps_bytes(body) if body is not None else None
        hdrs = self._headers(headers)
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        with self._mapped(total):
            async with asyncio.timeout(total), self._session.request(
                method, self._url(path), data=data, headers=hdrs, allow_redirects=False,
                ssl=self._tls, timeout=self._client_timeout,
            ) as resp:
                raw = await self._read_capped(resp)
                return self._decode(resp.status, raw)

    async def _read_capped(self, resp: aiohttp.ClientResponse) -> bytes:
        if resp.content_length is not None and resp.content_length > self._max:
            raise DelegationFailed("peer_error", f"{self.name} answer exceeds {self._max} bytes")
        if resp.content_length is not None:
            return await resp.read()  # its length is known, and within the cap
        chunks, size = [], 0
        async for chunk in resp.content.iter_chunked(65536):
            size += len(chunk)
            if size > self._max:
                raise DelegationFailed("peer_error",
                                       f"{self.name} answer exceeds {self._max} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def _decode(self, status: int, raw: bytes) -> Any:
        if 300 <= status < 400:
            raise DelegationFailed("peer_error", f"{self.name} redirected (not followed)")
        try:
            data = exact_json.loads(raw, max_depth=128)
        except ButlerError:
            raise DelegationFailed(
                "peer_error", f"{self.name} answered HTTP {status} with invalid JSON") from None
        if status >= 400:
            err = data.get("error") if isinstance(data, dict) else None
            if isinstance(err, dict) and isinstance(err.get("code"), str):
                details = err.get("details") if isinstance(err.get("details"), dict) else None
                raise error_from_code(err["code"], f"{self.name}: {err.get('message', '')}",
                                      details=details)
            raise DelegationFailed("peer_error", f"{self.name} answered HTTP {status}")
        return data

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
            extra[envelope.CHAIN_HEADER] = ",".join(chain)
            extra[envelope.DEPTH_HEADER] = str(len(chain))
        data = await self.request("POST", "/v2/tasks", body=body, headers=extra, timeout=timeout)
        return self._task(data)

    def _task(self, data: Any) -> Task:
        try:
            return butler_v2.decode_task(data)
        except ButlerError as err:
            raise DelegationFailed("peer_error",
                                   f"{self.name} sent an invalid task: {err.message}") from None

    async def get(self, task_id: str, *, timeout: float | None = None) -> Task:
        return self._task(await self.request("GET", f"/v2/tasks/{_q(task_id)}", timeout=timeout))

    async def cancel(self, task_id: str) -> Task:
        return self._task(await self.request("POST", f"/v2/tasks/{_q(task_id)}/cancel"))

    async def answer(self, task_id: str, text: str, *, input: dict[str, Any] | None = None,
                     blocking: bool = True) -> Task:
        body = butler_v2.encode_request(TaskRequest(text=text, input=input or {},
                                                     blocking=blocking))
        return self._task(await self.request("POST", f"/v2/tasks/{_q(task_id)}/input", body=body))

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
        with self._mapped(self._timeout):
            async with self._session.get(
                self._url(f"/v2/tasks/{_q(task_id)}/events"), headers=self._headers(),
                allow_redirects=False, ssl=self._tls, timeout=self._client_timeout,
            ) as resp:
                if resp.status != 200:
                    self._decode(resp.status, await self._read_capped(resp))
                name, data_lines = "message", []
                async for raw_line in self._lines(resp):
                    line = raw_line.decode("utf-8", "replace").rstrip("\r")
                    if line.startswith("event:"):
                        name = line[6:].strip()
                    elif line.startswith("data:"):
                        data_lines.append(line[5:].strip())
                    elif not line and data_lines:
                        yield name, exact_json.loads("\n".join(data_lines), max_depth=128)
                        name, data_lines = "message", []


    async def _lines(self, resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        """Lines of a stream, each at most ``max_response_bytes`` (aiohttp's own line
        reader stops at 128 KiB, and a task's output can be longer)."""
        buffer = b""
        async for chunk in resp.content.iter_any():
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                yield line
            if len(buffer) > self._max:
                raise DelegationFailed("peer_error",
                                       f"{self.name} sent an event over {self._max} bytes")
        if buffer:
            yield buffer


@contextlib.contextmanager
def transport_errors(name: str, timeout: float) -> Iterator[None]:
    """Every transport failure talking to a peer, as one ``DelegationFailed`` code."""
    try:
        yield
    except OutboundRefused as exc:
        raise DelegationFailed("peer_address_refused", f"{name}: {exc.message}") from None
    except ButlerError:
        raise
    except TimeoutError:
        raise DelegationFailed("peer_timeout",
                               f"{name} did not answer within {timeout:g}s") from None
    except aiohttp.NonHttpUrlClientError:
        raise DelegationFailed("peer_address_refused",
                               f"{name}: the URL is not http or https") from None
    except aiohttp.ClientConnectorCertificateError as exc:
        raise DelegationFailed(
            "peer_tls_error", f"{name}: certificate not trusted: {exc.certificate_error}"
        ) from None
    except aiohttp.ClientConnectorError as exc:
        raise DelegationFailed("peer_unreachable",
                               f"cannot connect to {name}: {exc.os_error}") from None
    except (aiohttp.ClientError, OSError, UnicodeDecodeError) as exc:
        # Only the kind of failure: aiohttp's text may quote the peer's raw bytes.
        raise DelegationFailed("peer_error", f"{name}: {_describe(exc)}") from None


def _describe(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    kind = type(exc).__name__
    return f"{kind} (HTTP {status})" if isinstance(status, int) else kind


def _q(task_id: str) -> str:
    """A peer chooses its task ids: never let one change the path it is put in."""
    return quote(task_id, safe="")
