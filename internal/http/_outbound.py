"""The one place outbound HTTP sessions are built: every call Butler makes (peers, agent
cards, webhooks, the registry) goes through a session from ``outbound_session``.

The session is aiohttp's, tuned for short JSON exchanges with a few known hosts:
connections are kept alive and reused; nothing is sent or kept that Butler does not use
(no cookie jar, no ``Accept-Encoding``, so answers are never compressed and never need
inflating, no ``User-Agent``); proxies and ``.netrc`` from the environment are ignored;
and the guard judges every URL and every resolved address (``OutboundGuard``). Callers
also pass ``allow_redirects=False``: a redirect is an answer, never followed.

A caller that must know who is at the other end before it sends something (a peer's
token: ``butler/delegation/peer_identity.py``) needs that once per connection, not once
per request: a connection reaches one process, and a kept-alive one reaches the process
that was there when it was opened. Such a caller is given its check when it is built
(a ``ConnectionCheck``) and hands it to each request it makes as the request's
``trace_request_ctx``; a session built with ``connection_checks=True`` awaits it when
that request is about to open a connection (aiohttp's ``on_connection_create_start``,
before the connection is made and before anything is written on it), and not when the
request takes a kept-alive connection from the pool. An exception from the check ends
the request with that exception. A connection made outside aiohttp (a gRPC channel)
awaits the check itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import SimpleNamespace

import aiohttp
from aiohttp import hdrs

from internal.http._outbound_guard import OutboundGuard

# Enough for every peer a busy instance talks to at once; each idle connection is
# kept for KEEPALIVE_SECONDS in case the next delegation goes to the same peer.
CONNECTION_LIMIT = 256
KEEPALIVE_SECONDS = 30.0
_SKIPPED_HEADERS = (hdrs.ACCEPT_ENCODING, hdrs.USER_AGENT)

ConnectionCheck = Callable[[], Awaitable[None]]


def outbound_session(guard: OutboundGuard, *, limit: int = CONNECTION_LIMIT,
                     keepalive_seconds: float = KEEPALIVE_SECONDS,
                     connection_checks: bool = False) -> aiohttp.ClientSession:
    """A session whose every request and connection passes ``guard``; close it when done.
    ``connection_checks``: a request about to open a connection first awaits the
    ``ConnectionCheck`` it carries as its ``trace_request_ctx``."""
    connector = aiohttp.TCPConnector(
        resolver=guard.resolver(), limit=limit, keepalive_timeout=keepalive_seconds,
        ttl_dns_cache=10,  # only addresses that passed the guard are ever cached
    )
    return aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        skip_auto_headers=_SKIPPED_HEADERS,
        trust_env=False,
        middlewares=(guard.middleware,),
        trace_configs=[_connection_checks()] if connection_checks else None,
    )


async def _before_connecting(session: aiohttp.ClientSession, context: SimpleNamespace,
                             params: aiohttp.TraceConnectionCreateStartParams) -> None:
    check = context.trace_request_ctx
    if check is not None:
        await check()


def _connection_checks() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(_before_connecting)
    return trace
