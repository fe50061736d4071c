"""The SDK's streamable HTTP client over Butler's one outbound path.

The SDK speaks HTTP through an ``httpx2`` client; this transport hands each of its requests
to a session from ``outbound_session``, so an MCP server's URL is judged by the same
``OutboundGuard`` as a peer's (the URL before connecting, every resolved address at
connection time) and redirects are answers, never followed. A configured token goes only to
the configured URL's origin.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aiohttp
import httpx2

from internal.http import CONFIGURED, OutboundGuard, outbound_session
from internal.protocol.a2a.model import OutboundRefused

# Hop-by-hop and computed headers: aiohttp sets its own.
_SKIPPED = frozenset({"host", "content-length", "transfer-encoding", "connection"})
# The SSE stream of a session stays open for as long as the session: no total limit.
_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10)


class GuardedTransport(httpx2.AsyncBaseTransport):
    """An operator wrote the URL into the config: loopback and private networks pass, as
    for a configured peer (``CONFIGURED``); metadata and link-local addresses do not."""

    def __init__(self, url: str, token: str = "", guard: OutboundGuard | None = None) -> None:
        self._session = outbound_session(guard or OutboundGuard(CONFIGURED))
        self._origin = _origin(url)
        self._token = token

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        headers = [(k, v) for k, v in request.headers.multi_items()
                   if k.lower() not in _SKIPPED and k.lower() != "authorization"]
        if self._token and _origin(str(request.url)) == self._origin:
            headers.append(("Authorization", f"Bearer {self._token}"))
        try:
            response = await self._session.request(
                request.method, str(request.url), headers=headers, data=await request.aread(),
                allow_redirects=False, timeout=_TIMEOUT)
        except OutboundRefused as exc:
            raise httpx2.ConnectError(f"refused by the outbound guard: {exc}",
                                      request=request) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise httpx2.ConnectError(f"{type(exc).__name__}: {exc}", request=request) from None
        return httpx2.Response(response.status, headers=list(response.headers.items()),
                               stream=_Body(response), request=request)

    async def aclose(self) -> None:
        await self._session.close()


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


class _Body(httpx2.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, OSError) as exc:
            raise httpx2.ReadError(f"{type(exc).__name__}: {exc}") from None

    async def aclose(self) -> None:
        self._response.release()
