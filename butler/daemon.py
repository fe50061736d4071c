"""Assembles one Butler instance from its config and runs its HTTP server."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.web_request import BaseRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from butler.audit import AuditLog
from butler.card import build_card
from butler.config.model import Config, http_url
from butler.delegation.registry_link import RegistryLink
from butler.engine.engine import TaskEngine
from butler.engine.run import Delegator, RunDeps
from butler.engine.store import SqliteTaskStore
from butler.engine.workspace import SqliteWorkspace
from butler.memory_store import MemoryStore
from butler.skills.catalog import SkillCatalog, build_skills
from butler.swarm.admission import SwarmPolicy
from butler.telemetry import build_tracer_provider
from internal.protocol.a2a import jsonwire
from internal.protocol.a2a.auth import TokenVerifier
from internal.protocol.a2a.http_common import (
    auth_middleware,
    error_middleware,
    error_response,
    inflight_middleware,
    json_response,
    protocol_error,
)
from internal.protocol.a2a.rest import RestBinding, RestLimits

log = logging.getLogger("butler.daemon")

PUBLIC_PATHS = ("/healthz", "/.well-known/agent-card.json")
DelegatorFactory = Callable[["Daemon"], Delegator | None]


@dataclass
class Daemon:
    config: Config
    span_exporter: SpanExporter | None = None
    delegator_factory: DelegatorFactory | None = None
    port: int = 0
    engine: TaskEngine = field(init=False)
    tracer_provider: TracerProvider = field(init=False)
    registry_link: RegistryLink = field(init=False)
    _closers: list[Callable[[], Any]] = field(default_factory=list, init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)
    _runner: web.AppRunner | None = field(default=None, init=False)
    _server: asyncio.Server | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return self.config.agent.url or http_url(self.config.a2a.bind_address, self.port)

    async def start(self) -> None:
        cfg = self.config
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        memory = MemoryStore(cfg.data_dir / "memory.db")
        self._closers.append(memory.close)
        catalog = SkillCatalog(build_skills(cfg.skills, memory),
                               cfg.mcp_server.allowed_capabilities)
        audit = AuditLog(cfg.data_dir / "audit.db")
        self._closers.append(audit.close)
        self.tracer_provider = build_tracer_provider(cfg.telemetry, cfg.agent.id,
                                                     self.span_exporter)
        self._closers.append(self.tracer_provider.shutdown)
        store = SqliteTaskStore(cfg.data_dir / "tasks.db")
        workspace = SqliteWorkspace(cfg.data_dir / "workspace.db", cfg.swarm.workspace_ttl_hours)
        self._closers.append(workspace.close)
        deps = RunDeps(
            agent_id=cfg.agent.id,
            tracer=self.tracer_provider.get_tracer("butler"),
            audit=lambda kind, **f: _safe_audit(audit, kind, **f),
            max_children=cfg.swarm.max_children_per_task,
            workspace=workspace,
        )
        self.engine = TaskEngine(
            deps, store=store, catalog=catalog,
            policy=SwarmPolicy(cfg.agent.id, cfg.swarm.max_depth, cfg.swarm.budget_usd),
            delegator=None, retention_hours=cfg.tasks.retention_hours,
            default_timeout=cfg.tasks.default_timeout_seconds,
            card=lambda ident: build_card(cfg, catalog, ident, self.url),
        )
        self.registry_link = RegistryLink(cfg, lambda: build_card(cfg, catalog, None, self.url),
                                          lambda: self.url)
        # swarm.enabled: false keeps every admission check but never delegates.
        if self.delegator_factory is not None and cfg.swarm.enabled:
            self.engine.delegator = self.delegator_factory(self)
        await self.engine.start()
        self._tasks.append(asyncio.create_task(_purge_workspace(workspace)))
        app = build_app(cfg, self.engine, catalog)
        handler_args = _handler_args(cfg)
        self._runner = web.AppRunner(
            app, handle_signals=False,
            shutdown_timeout=cfg.limits.shutdown_grace_seconds, **handler_args,
        )
        await self._runner.setup()
        assert self._runner.server is not None
        self._server = await _listen(self._runner.server, cfg, handler_args)
        self.port = self._server.sockets[0].getsockname()[1]
        if cfg.a2a.bind_address in ("0.0.0.0", "::") and not cfg.agent.url:  # noqa: S104 -- a comparison, not a bind
            log.warning("bound to all interfaces without agent.url: peers and registries "
                        "would be told %s; set agent.url to the address peers use", self.url)
        if not _is_loopback(cfg.a2a.bind_address):
            log.warning("listening on %s: put TLS in front (a reverse proxy) before exposing "
                        "it beyond this machine", cfg.a2a.bind_address)
        log.info("butler %s listening on %s", cfg.agent.id, self.url)
        await self.registry_link.start()

    async def stop(self) -> None:
        grace = self.config.limits.shutdown_grace_seconds
        for task in self._tasks:
            task.cancel()
        await self.registry_link.stop()
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            if self._runner.server is not None:
                # Idle keep-alive connections close now; busy ones after their response.
                self._runner.server.pre_shutdown()
            await self._runner.shutdown()
        await self.engine.stop(grace)
        if self.engine.delegator is not None:
            await self.engine.delegator.aclose()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.engine.store.close()
        for close in reversed(self._closers):
            close()


async def _purge_workspace(workspace: SqliteWorkspace) -> None:
    interval = min(3600.0, max(workspace.ttl_seconds / 10, 1.0))
    while True:
        await asyncio.sleep(interval)
        try:
            purged = await asyncio.to_thread(workspace.purge)
        except Exception:
            log.exception("workspace purge failed")
        else:
            if purged:
                log.info("purged %d expired workspace entries", purged)


def _safe_audit(audit: AuditLog, kind: str, **fields: Any) -> None:
    try:
        audit.append(kind, **fields)
    except Exception:
        log.exception("could not write audit record %s", kind)


def build_app(cfg: Config, engine: TaskEngine, catalog: SkillCatalog) -> web.Application:
    verifier = TokenVerifier(cfg.a2a.tokens)
    app = web.Application(
        client_max_size=cfg.limits.max_body_bytes,
        middlewares=[
            error_middleware,
            inflight_middleware(cfg.limits.max_inflight),
            auth_middleware(verifier, PUBLIC_PATHS),
        ],
    )
    rest = RestBinding(engine, RestLimits(cfg.limits.max_json_depth,
                                          cfg.limits.body_timeout_seconds,
                                          cfg.tasks.max_page_size))
    app.add_routes(rest.routes())

    async def healthz(request: web.Request) -> web.Response:
        return json_response({"status": "ok", "agent_id": cfg.agent.id})

    app.add_routes([web.get("/healthz", healthz)])
    return app


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _handler_args(cfg: Config) -> dict[str, Any]:
    """Per-connection settings. aiohttp's keep-alive timer starts when a connection opens
    and again after each response, and closes it if no complete request head arrived:
    that is the header timeout. After an error reply to a request whose body was not
    read (413, 408), the rest of the body is drained for at most the body timeout."""
    return {
        "access_log": None,
        "keepalive_timeout": cfg.limits.header_timeout_seconds,
        "lingering_time": min(10.0, cfg.limits.body_timeout_seconds),
    }


_REFUSE_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
)


class _Refuse(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        body = jsonwire.dumps_bytes({"error": {"code": "overloaded",
                                               "message": "too many connections"}})
        assert isinstance(transport, asyncio.Transport)
        transport.write(_REFUSE_503 % (len(body), body))
        transport.close()


class _Connection(web.RequestHandler):
    """aiohttp's connection handler, counted from creation (not from ``connection_made``,
    which runs later: a burst of accepts would otherwise all pass the cap) and answering
    malformed HTTP with a JSON error instead of text quoting the raw request."""

    def __init__(self, server: web.Server, open_now: weakref.WeakSet[_Connection],
                 **kwargs: Any) -> None:
        super().__init__(server, **kwargs)
        self._open_now = open_now
        open_now.add(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._open_now.discard(self)
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
            log.debug("rejected malformed HTTP from %s: %s", request.remote,
                      type(exc).__name__ if exc is not None else status)
        response = error_response(protocol_error(status, exc))
        response.force_close()
        return response


async def _listen(server: web.Server, cfg: Config,
                  handler_args: dict[str, Any]) -> asyncio.Server:
    """Listen with a cap on open connections: past it, a 503 and close."""
    cap = cfg.limits.max_connections
    loop = asyncio.get_running_loop()
    open_now: weakref.WeakSet[_Connection] = weakref.WeakSet()

    def factory() -> asyncio.Protocol:
        if len(open_now) >= cap:
            return _Refuse()
        return _Connection(server, open_now, loop=loop, **handler_args)

    family = socket.AF_INET6 if ":" in cfg.a2a.bind_address else socket.AF_INET
    return await loop.create_server(factory, cfg.a2a.bind_address, cfg.a2a.port,
                                    family=family, reuse_address=True, backlog=cap)
