"""The listening socket: a cap on open connections and one address's share of them, the
header deadline, and JSON answers to malformed HTTP. Shared by the daemon, its metrics
port and the registry service."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_request import BaseRequest

from internal.http._connections import PortConnections, peer_address
from internal.http._incidents import MALFORMED_HTTP, SLOW_HEADERS, IncidentLog
from internal.http._json_http import error_response, protocol_error
from internal.protocol.a2a.codec import exact_json
from internal.shares import Held

log = logging.getLogger("butler.http")


@dataclass(frozen=True)
class ListenSettings:
    host: str
    port: int
    max_connections: int = 256
    # One address's part of them (None: the shares' default, three quarters).
    max_connections_per_address: int | None = None
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    tls: ssl.SSLContext | None = None

    def handler_args(self) -> dict[str, Any]:
        """Per-connection settings. aiohttp's keep-alive timer starts when a connection
        opens and again after each response, and closes it if no complete request head
        arrived: that is the header timeout. After an error reply to a request whose body
        was not read (413, 408), the rest of the body is drained for at most the body
        timeout."""
        return {
            "access_log": None,
            "keepalive_timeout": self.header_timeout_seconds,
            "lingering_time": min(10.0, self.body_timeout_seconds),
        }


_REFUSE_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
)


def _refuse(transport: asyncio.BaseTransport) -> None:
    body = exact_json.dumps_bytes({"error": {"code": "overloaded",
                                           "message": "too many connections"}})
    assert isinstance(transport, asyncio.Transport)
    transport.write(_REFUSE_503 % (len(body), body))
    transport.close()


class _Refuse(asyncio.Protocol):
    def __init__(self, connections: PortConnections) -> None:
        self._connections = connections

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._connections.refuse_full(peer_address(transport))
        _refuse(transport)


class _Connection(web.RequestHandler):
    """aiohttp's connection handler, admitted in ``connection_made`` (the first moment the
    peer's address is known) within the cap and the address's share of it, counted and
    checked in one step, and answering malformed HTTP with a JSON error instead of text
    quoting the raw request. Hostile clients are reported as incidents (rate-limited),
    never logged once per connection."""

    def __init__(self, server: web.Server, connections: PortConnections,
                 incidents: IncidentLog, **kwargs: Any) -> None:
        super().__init__(server, **kwargs)
        self._connections = connections
        self._incidents = incidents
        self._place: Held | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Past the cap or the address's share of it: a 503 before aiohttp reads a byte.
        self._place = self._connections.take(peer_address(transport))
        if self._place is None:
            _refuse(transport)
            return
        super().connection_made(transport)

    def _process_keepalive(self) -> None:
        # aiohttp's keep-alive timer is the header timeout (see handler_args). Closing an
        # idle kept-alive connection is routine; one that never sent a whole request head
        # is a slow or idle client holding a slot.
        was_open = not self._force_close
        transport = self.transport
        super()._process_keepalive()
        if was_open and self._force_close and self._request_count == 0:
            self._incidents.report(
                SLOW_HEADERS, f"closed a connection from {peer_address(transport)}: no complete "
                f"request head within {self.keepalive_timeout:g}s (server.header_timeout_seconds)")

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._place is not None:  # None: refused in connection_made
            self._place.release()
        # aiohttp's teardown for a refused connection too: it drops the request parser,
        # which refers back to this handler, a cycle only the collector would free.
        super().connection_lost(exc)

    def handle_error(self, request: BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("response already started; cannot send an error")
        if status >= 500:
            log.error("unhandled error on %s %s", request.method, request.path, exc_info=exc)
        else:
            # Never the exception text: aiohttp quotes the offending bytes in it.
            self._incidents.report(MALFORMED_HTTP, f"rejected a request from {request.remote}: "
                                   f"{type(exc).__name__ if exc is not None else status}")
        response = error_response(protocol_error(status, exc))
        response.force_close()
        return response


async def listen(server: web.Server, settings: ListenSettings,
                 incidents: IncidentLog, *, serving: bool = True) -> asyncio.Server:
    """Listen with a cap on open connections: past it, a 503 and close. ``serving=False``:
    the port is bound (its number known) but refuses connections until ``start_serving``."""
    cap = settings.max_connections
    handler_args = settings.handler_args()
    loop = asyncio.get_running_loop()
    connections = PortConnections(cap, settings.max_connections_per_address, incidents)

    def factory() -> asyncio.Protocol:
        if connections.full:  # full already: no handler built for it
            return _Refuse(connections)
        return _Connection(server, connections, incidents, loop=loop, **handler_args)

    tls = settings.tls
    # A client that never finishes the TLS handshake is as slow as one that never sends
    # its request head: same deadline.
    handshake = settings.header_timeout_seconds if tls is not None else None
    return await loop.create_server(factory, settings.host, settings.port,
                                    **socket_options(settings), ssl=tls,
                                    ssl_handshake_timeout=handshake, start_serving=serving)


def socket_options(settings: ListenSettings) -> dict[str, Any]:
    """How every port listens (``loop.create_server`` arguments)."""
    return {
        "family": socket.AF_INET6 if ":" in settings.host else socket.AF_INET,
        "reuse_address": True,
        # A deep accept queue: a burst past the cap is accepted and refused at once. With
        # a queue only as deep as the cap, the kernel dropped the rest of the burst
        # mid-handshake and those clients hung for up to ~30 s of SYN-ACK retries.
        "backlog": max(settings.max_connections, socket.SOMAXCONN),
    }
