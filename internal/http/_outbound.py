"""The one place outbound HTTP sessions are built: every call Butler makes (peers, agent
cards, webhooks, the registry) goes through a session from ``outbound_session``.

The session is aiohttp's, tuned for short JSON exchanges with a few known hosts:
connections are kept alive and reused; nothing is sent or kept that Butler does not use
(no cookie jar, no ``Accept-Encoding``, so answers are never compressed and never need
inflating, no ``User-Agent``); proxies and ``.netrc`` from the environment are ignored;
and the guard judges every URL and every resolved address (``OutboundGuard``). Callers
also pass ``allow_redirects=False``: a redirect is an answer, never followed.
"""

from __future__ import annotations

import aiohttp
from aiohttp import hdrs

from internal.http._new_connections import new_connection_tracing
from internal.http._outbound_guard import OutboundGuard

# Enough for every peer a busy instance talks to at once; each idle connection is
# kept for KEEPALIVE_SECONDS in case the next delegation goes to the same peer.
CONNECTION_LIMIT = 256
KEEPALIVE_SECONDS = 30.0
_SKIPPED_HEADERS = (hdrs.ACCEPT_ENCODING, hdrs.USER_AGENT)


def outbound_session(guard: OutboundGuard, *, limit: int = CONNECTION_LIMIT,
                     keepalive_seconds: float = KEEPALIVE_SECONDS,
                     new_connection_checks: bool = False) -> aiohttp.ClientSession:
    """A session whose every request and connection passes ``guard``; close it when done.
    ``new_connection_checks``: a request about to open a connection first awaits the
    check its context set (``before_new_connections``)."""
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
        trace_configs=[new_connection_tracing()] if new_connection_checks else None,
    )
