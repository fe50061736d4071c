"""The listening socket: a cap on open connections and one address's share of them, the
header deadline, and JSON answers to malformed HTTP. Shared by the daemon, its metrics
port and the registry service."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web
from aiohttp.web_request import BaseRequest

from internal.http._accepting import ListenSettings, Port, open_port
from internal.http._connections import PortConnections, peer_address
from internal.http._incidents import MALFORMED_HTTP, SLOW_HEADERS, IncidentLog
from internal.http._json_http import error_response, protocol_error
from internal.protocol.a2a.codec import exact_json
from internal.shares import Held

log = logging.getLogger("butler.http")


def _refusal_503() -> bytes:
    body = exact_json.dumps_bytes({"error": {"code": "overloaded",
                                           "message": "too many connections"}})
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body))


# What a connection past the cap or its address's share is sent before it is closed.
REFUSAL_503 = _refusal_503()


class _Connection(web.RequestHandler):
    """aiohttp's connection handler for a connection the port admitted (its ``place``),
    answering malformed HTTP with a JSON error instead of text quoting the raw request.
    Hostile clients are reported as incidents (rate-limited), never logged once per
    connection."""

    def __init__(self, server: web.Server, place: Held, incidents: IncidentLog,
                 **kwargs: Any) -> None:
        super().__init__(server, **kwargs)
        self._place = place
        self._incidents = incidents
        # Done once the connection is gone: a refusal held for it ends then (_json_http).
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

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
        self._place.release()
        if not self.lost.done():
            self.lost.set_result(None)
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
                 incidents: IncidentLog, *, serving: bool = True) -> Port:
    """Listen with a cap on open connections and one address's share of it: past them, a
    503 and close, before anything is built for the connection (``_accepting``).
    ``serving=False``: the port is bound (its number known) but accepts nothing until
    ``start_serving``."""
    handler_args = settings.handler_args()
    loop = asyncio.get_running_loop()
    connections = PortConnections(settings.max_connections,
                                  settings.max_connections_per_address, incidents)

    def connection(place: Held) -> asyncio.Protocol:
        return _Connection(server, place, incidents, loop=loop, **handler_args)

    return open_port(settings, connections, connection, refusal=REFUSAL_503,
                     serving=serving)
