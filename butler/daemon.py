"""Assembles one Butler instance from its config and runs its HTTP server."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from butler.audit import AuditLog
from butler.card import build_card
from butler.config.model import Config
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
    inflight_middleware,
    json_response,
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
    _closers: list[Callable[[], Any]] = field(default_factory=list, init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)
    _runner: web.AppRunner | None = field(default=None, init=False)
    _server: asyncio.Server | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return self.config.agent.url or f"http://{self.config.a2a.bind_address}:{self.port}"

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
        if self.delegator_factory is not None:
            self.engine.delegator = self.delegator_factory(self)
        await self.engine.start()
        self._tasks.append(asyncio.create_task(_purge_workspace(workspace)))
        app = build_app(cfg, self.engine, catalog)
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None,
            keepalive_timeout=cfg.limits.header_timeout_seconds,
        )
        await self._runner.setup()
        assert self._runner.server is not None
        self._server = await _listen(self._runner.server, cfg)
        self.port = self._server.sockets[0].getsockname()[1]
        if cfg.a2a.bind_address not in ("127.0.0.1", "::1", "localhost"):
            log.warning("listening on %s: put TLS in front (a reverse proxy) before exposing "
                        "it beyond this machine", cfg.a2a.bind_address)
        log.info("butler %s listening on %s", cfg.agent.id, self.url)

    async def stop(self) -> None:
        grace = self.config.limits.shutdown_grace_seconds
        for task in self._tasks:
            task.cancel()
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
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


async def _listen(server: web.Server, cfg: Config) -> asyncio.Server:
    """Listen with a cap on open connections: past it, a 503 and close."""
    cap = cfg.limits.max_connections

    def factory() -> asyncio.Protocol:
        if len(server.connections) >= cap:
            return _Refuse()
        return server()

    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in cfg.a2a.bind_address else socket.AF_INET
    return await loop.create_server(factory, cfg.a2a.bind_address, cfg.a2a.port,
                                    family=family, reuse_address=True, backlog=cap)
