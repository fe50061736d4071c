"""Butler's MCP server over streamable HTTP at ``/mcp`` in the daemon (docs/mcp.md).

The SDK's session manager is an ASGI app; ``asgi_handler`` serves an aiohttp request
through it, after the daemon's gate has authenticated the caller: the bearer token's
identity rides in the ASGI scope and each call is a task of that caller, not of a fixed
one. Sessions are kept (``Mcp-Session-Id``), so a call's answer is an SSE stream that
carries its progress notifications first, and a ``notifications/cancelled`` posted in the
same session cancels the call's task. A session belongs to the identity that opened it:
another token naming it gets 404, as for a session that never was (the SDK's check, fed
the caller as its authenticated user).
There is no GET stream (405, as the spec allows): nothing is sent outside a call's answer.

The SDK is an optional extra: without it the daemon serves no ``/mcp`` and says so once.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import AsyncExitStack
from typing import Any

from aiohttp import web

from butler.config.model import Config
from butler.edges.mcp_sessions import SessionPlaces, shared_manager
from butler.skills.catalog import SkillCatalog
from internal.http import IDENTITY, read_body
from internal.protocol.a2a.codec import swarm_envelope
from internal.protocol.a2a.model import Envelope, Identity
from internal.protocol.a2a.server import TaskService
from internal.shares import ANONYMOUS

log = logging.getLogger("butler.mcp")

MCP_PATH = "/mcp"
SESSION_IDLE_SECONDS = 30 * 60.0  # a session unused this long is ended
# Where the authenticated caller rides in the ASGI scope, for the tools to read back.
SCOPE_IDENTITY = "butler.identity"
SCOPE_ENVELOPE = "butler.envelope"

Message = MutableMapping[str, Any]
AsgiApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Message]],
                    Callable[[Message], Awaitable[None]]], Awaitable[None]]


async def mount_mcp(app: web.Application, stack: AsyncExitStack, cfg: Config,
                    service: TaskService, catalog: SkillCatalog) -> bool:
    """Add ``/mcp`` to ``app``; its session manager starts with the first request and
    stops when ``stack`` closes. False, and no route, when the MCP SDK is not installed."""
    if importlib.util.find_spec("mcp") is None:
        if cfg.mcp_server.allowed_capabilities is not None:
            log.info("no /mcp: the MCP SDK is not installed (pip install 'butler-a2a[mcp]')")
        return False
    edge = _McpEdge(cfg, service, catalog)
    stack.push_async_callback(edge.aclose)
    app.router.add_post(MCP_PATH, edge.handle)
    app.router.add_delete(MCP_PATH, edge.handle)
    return True


class _McpEdge:
    """The SDK (and pydantic, starlette and httpx with it) is imported by the first ``/mcp``
    request, not at start: a daemon nobody reaches over MCP does not carry it in memory."""

    def __init__(self, cfg: Config, service: TaskService, catalog: SkillCatalog) -> None:
        self._cfg, self._service, self._catalog = cfg, service, catalog
        self._sessions = SessionPlaces(cfg.shares.mcp_sessions)
        self._handler: Callable[[web.Request], Awaitable[web.StreamResponse]] | None = None
        self._running: Running | None = None
        self._starting = asyncio.Lock()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self._handler is None:
            async with self._starting:
                if self._handler is None:
                    self._handler = await self._start()
        if request.method == "POST" and "Mcp-Session-Id" not in request.headers:
            ident = request.get(IDENTITY)
            with self._sessions.opening(ANONYMOUS if ident is None else ident.name):
                return await self._handler(request)
        return await self._handler(request)

    async def _start(self) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        from butler.edges.mcp import ButlerTools, mcp_server

        # Its "started" and "shutting down" lines at info say nothing the daemon's log does not.
        logging.getLogger("mcp.server.streamable_http_manager").setLevel(logging.WARNING)
        cfg = self._cfg
        server = mcp_server(ButlerTools(self._service, self._catalog), cfg.agent.name,
                            package_version(), caller=caller_of, envelope=envelope_of)
        manager = shared_manager(
            app=server, stateless=False, json_response=False,
            max_request_body_size=cfg.limits.max_body_bytes,
            max_sessions=cfg.shares.mcp_sessions.total,
            session_idle_timeout=SESSION_IDLE_SECONDS)
        self._running = await _run(manager.run)
        return asgi_handler(manager.handle_request, cfg.limits.body_timeout_seconds)

    async def aclose(self) -> None:
        if self._running is not None:
            await _stop(self._running)


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("butler-a2a")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def caller_of(request: Any) -> Identity:
    """The caller of an MCP request over HTTP: the identity the gate put in the ASGI
    scope. None there (which the route never lets happen) refuses the call."""
    scope = getattr(request, "scope", None)
    ident = scope.get(SCOPE_IDENTITY) if isinstance(scope, dict) else None
    if not isinstance(ident, Identity):
        raise PermissionError("no authenticated caller for this MCP request")
    return ident


def envelope_of(request: Any) -> Envelope:
    """The swarm envelope of an MCP request over HTTP: its ``X-Swarm-*`` headers, read by
    the one function ``/v2`` reads them with (``asgi_handler``, before the SDK)."""
    scope = getattr(request, "scope", None)
    envelope = scope.get(SCOPE_ENVELOPE) if isinstance(scope, dict) else None
    return envelope if isinstance(envelope, Envelope) else Envelope()


Running = tuple[asyncio.Task[None], asyncio.Event]


async def _run(run: Callable[[], contextlib.AbstractAsyncContextManager[None]]) -> Running:
    """Enter ``run()`` in a task of its own, so that it is entered and left in the same
    task (anyio's rule) whichever task stops the daemon."""
    started, done = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with run():
            started.set()
            await done.wait()

    task = asyncio.create_task(hold(), name="mcp-http")
    waiter = asyncio.create_task(started.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if not started.is_set():
        waiter.cancel()
        await task  # raises what stopped it
    return task, done


async def _stop(running: Running) -> None:
    task, done = running
    done.set()
    await task


def asgi_handler(asgi: AsgiApp,
                 body_seconds: float) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        # Within the app's client_max_size, and cut off as slow as any other body.
        # The caller chain, depth and budget, checked as on /v2 (400 invalid_envelope).
        envelope = swarm_envelope.decode_v2_envelope({}, request.headers)
        body = await read_body(request, body_seconds=body_seconds)
        over = asyncio.Event()
        replies = _Replies(request)
        try:
            await asgi(_scope(request, envelope), _receiver(body, over), replies.send)
        finally:
            over.set()
        return await replies.response()

    return handle


def _scope(request: web.Request, envelope: Envelope) -> dict[str, Any]:
    ident = request.get(IDENTITY)
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": request.method, "scheme": request.scheme, "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1"),
        "query_string": request.rel_url.raw_query_string.encode("ascii"), "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": None, SCOPE_IDENTITY: ident, "user": _session_owner(ident),
        SCOPE_ENVELOPE: envelope,
    }


def _session_owner(ident: object) -> object:
    """The caller as the SDK's authenticated user: the session manager binds a session to
    the user that opened it and answers 404 to any other. It carries the identity's name,
    never the token (the gate has checked that already)."""
    if not isinstance(ident, Identity):
        return None
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    return AuthenticatedUser(AccessToken(token="", client_id=ident.name, scopes=[]))


def _receiver(body: bytes, over: asyncio.Event) -> Callable[[], Awaitable[Message]]:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await over.wait()  # the body is read whole: what follows is the end of the request
        return {"type": "http.disconnect"}

    return receive


class _Replies:
    """The ASGI ``send`` side: an aiohttp response, streamed as the app writes it."""

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self._response: web.StreamResponse | None = None

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for key, value in message.get("headers", []):
                response.headers.add(key.decode("latin-1"), value.decode("latin-1"))
            await response.prepare(self._request)
            self._response = response
        elif message["type"] == "http.response.body" and self._response is not None:
            if chunk := message.get("body", b""):
                await self._response.write(chunk)
            if not message.get("more_body", False):
                await self._response.write_eof()

    async def response(self) -> web.StreamResponse:
        if self._response is None:
            raise web.HTTPInternalServerError(text="the MCP server gave no answer")
        return self._response
