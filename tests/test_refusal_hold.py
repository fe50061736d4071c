"""A refusal held for its Retry-After (``server.refusal_hold_seconds``) is held only while
its connection is open: a client that sends a request and hangs up at once leaves nothing
behind, so the requests held stay within its address's share of the connections."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from internal.http import (
    REFUSAL_HOLD,
    IncidentLog,
    ListenSettings,
    error_middleware,
    listen,
)
from internal.http._json_http import Handler
from internal.protocol.a2a.model import Unavailable


@pytest.fixture
async def incidents() -> AsyncIterator[IncidentLog]:
    log = IncidentLog(logging.getLogger("test.refusal_hold"))
    yield log
    log.close()


async def test_a_held_refusal_ends_when_its_client_hangs_up(incidents: IncidentLog) -> None:
    refused = asyncio.Event()
    ended = asyncio.Event()

    @web.middleware
    async def outermost(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        finally:
            ended.set()

    async def busy(_: web.Request) -> web.Response:
        refused.set()
        raise Unavailable("rate_limited", "too many requests; retry later", retry_after=3600)

    app = web.Application(middlewares=[outermost, error_middleware])
    app[REFUSAL_HOLD] = 3600.0
    app.router.add_get("/", busy)
    settings = ListenSettings("127.0.0.1", 0, max_connections=4)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1,
                           **settings.handler_args())
    await runner.setup()
    assert runner.server is not None
    port = await listen(runner.server, settings, incidents)
    try:
        _, writer = await asyncio.open_connection(*port.sockets[0].getsockname()[:2])
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        async with asyncio.timeout(5):
            await refused.wait()
        writer.close()  # gone while its refusal is held
        async with asyncio.timeout(5):
            await ended.wait()
    finally:
        port.close()
        await runner.cleanup()
