"""Assembles one Butler instance from its config and runs its HTTP server."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Tracer

from butler.a2a_wiring import standard_a2a
from butler.audit import AuditLog
from butler.audit.writer import AuditWriter
from butler.card import build_card
from butler.config.model import Config, http_url
from butler.delegation.registry_link import RegistryLink
from butler.engine.engine import TaskEngine
from butler.engine.run import Delegator, RunDeps
from butler.engine.store import SqliteTaskStore
from butler.engine.workspace import SqliteWorkspace
from butler.memory import MemoryStore
from butler.metrics import (
    ButlerMetrics,
    metrics_middleware,
    metrics_route,
    observe_audit,
    serve_metrics,
)
from butler.push.guard import PushGuard
from butler.push.service import PushNotifications
from butler.skills.catalog import SkillCatalog, build_skills
from butler.storage import private_folder
from butler.swarm.admission import SwarmPolicy
from butler.telemetry import build_tracer_provider, task_tracer
from internal.http import (
    ERROR_RENDERERS,
    INCIDENTS,
    IncidentLog,
    ListenSettings,
    TokenBuckets,
    TokenVerifier,
    error_middleware,
    gate_middleware,
    json_response,
    listen,
)
from internal.protocol.a2a.server import BUTLER_V2_PATH, PushService, RestBinding, RestLimits

log = logging.getLogger("butler.daemon")

PUBLIC_PATHS = ("/healthz", "/.well-known/agent-card.json", BUTLER_V2_PATH)
DelegatorFactory = Callable[["Daemon"], Delegator | None]


@dataclass
class Daemon:
    config: Config
    span_exporter: SpanExporter | None = None
    delegator_factory: DelegatorFactory | None = None
    port: int = 0
    push_guard: PushGuard | None = None  # tests: a guard that lets webhooks on loopback through
    push: PushNotifications | None = field(default=None, init=False)
    engine: TaskEngine = field(init=False)
    tracer_provider: TracerProvider = field(init=False)
    tracer: Tracer = field(init=False)
    registry_link: RegistryLink = field(init=False)
    metrics: ButlerMetrics = field(default_factory=ButlerMetrics, init=False)
    incidents: IncidentLog = field(init=False)
    _closers: list[Callable[[], Any]] = field(default_factory=list, init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)
    _aclosers: list[Callable[[], Awaitable[None]]] = field(default_factory=list, init=False)
    # Databases, and writers into them: closed last, in reverse order, after the engine.
    _storage: list[Callable[[], Awaitable[None]]] = field(default_factory=list, init=False)
    _runner: web.AppRunner | None = field(default=None, init=False)
    _server: asyncio.Server | None = field(default=None, init=False)

    def _record(self, audit: AuditWriter, kind: str, fields: dict[str, Any]) -> None:
        audit.submit(kind, fields)
        observe_audit(self.metrics, kind, fields)

    @property
    def url(self) -> str:
        a2a = self.config.a2a
        return self.config.agent.url or http_url(a2a.bind_address, self.port,
                                                 tls=a2a.tls is not None)

    async def start(self) -> None:
        cfg = self.config
        private_folder(cfg.data_dir)
        memory = await MemoryStore.open(cfg.data_dir / "memory.db")
        self._storage.append(memory.close)
        catalog = SkillCatalog(build_skills(cfg.skills, memory),
                               cfg.mcp_server.allowed_capabilities)
        audit_log = await AuditLog.open(cfg.data_dir / "audit.db")
        self._storage.append(audit_log.db.close)
        audit = AuditWriter(audit_log)
        self._storage.append(audit.close)  # closed first: flushes into the open log
        self.tracer_provider = build_tracer_provider(cfg.telemetry, cfg.agent.id,
                                                     self.span_exporter)
        self._closers.append(self.tracer_provider.shutdown)
        self.tracer = task_tracer(self.tracer_provider, exporting=self.span_exporter is not None
                                  or cfg.telemetry.exporter != "none")
        store = await SqliteTaskStore.open(cfg.data_dir / "tasks.db")
        workspace = await SqliteWorkspace.open(cfg.data_dir / "workspace.db",
                                               cfg.swarm.workspace_ttl_hours)
        self._storage.append(workspace.close)
        deps = RunDeps(
            agent_id=cfg.agent.id,
            tracer=self.tracer,
            audit=lambda kind, **f: self._record(audit, kind, f),
            max_children=cfg.swarm.max_children_per_task,
            max_tasks_per_caller=cfg.rate_limits.max_inflight_tasks_per_caller,
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
        self.push = PushNotifications(cfg.a2a.push_notifications, self.engine, cfg.data_dir,
                                      self.push_guard)
        await self.push.start()
        app = build_app(cfg, self.engine, catalog, self.metrics, lambda: self.url, self.push)
        self.incidents = IncidentLog(logging.getLogger("butler.http"))
        app[INCIDENTS] = self.incidents
        settings = ListenSettings(
            host=cfg.a2a.bind_address, port=cfg.a2a.port,
            max_connections=cfg.limits.max_connections,
            header_timeout_seconds=cfg.limits.header_timeout_seconds,
            body_timeout_seconds=cfg.limits.body_timeout_seconds, tls=server_tls(cfg))
        self._runner = web.AppRunner(
            app, handle_signals=False,
            shutdown_timeout=cfg.limits.shutdown_grace_seconds, **settings.handler_args(),
        )
        await self._runner.setup()
        assert self._runner.server is not None
        self._server = await listen(self._runner.server, settings, self.incidents)
        self.port = self._server.sockets[0].getsockname()[1]
        if cfg.a2a.bind_address in ("0.0.0.0", "::") and not cfg.agent.url:  # noqa: S104 -- a comparison, not a bind
            log.warning("bound to all interfaces without agent.url: peers and registries "
                        "would be told %s; set agent.url to the address peers use", self.url)
        if not _is_loopback(cfg.a2a.bind_address):
            log.warning("listening on %s: put TLS in front (a reverse proxy) before exposing "
                        "it beyond this machine", cfg.a2a.bind_address)
        log.info("butler %s listening on %s", cfg.agent.id, self.url)
        if cfg.metrics.enabled and cfg.metrics.listen:
            runner = await serve_metrics(self.metrics, cfg.metrics.listen)
            self._aclosers.append(runner.cleanup)
        await self.registry_link.start()

    async def stop(self) -> None:
        grace = self.config.limits.shutdown_grace_seconds
        for task in self._tasks:
            task.cancel()
        await self.registry_link.stop()
        for aclose in reversed(self._aclosers):
            await aclose()
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            if self._runner.server is not None:
                # Idle keep-alive connections close now; busy ones after their response.
                self._runner.server.pre_shutdown()
            await self._runner.shutdown()
        await self.engine.stop(grace)
        if self.push is not None:
            await self.push.aclose()
        if self.engine.delegator is not None:
            await self.engine.delegator.aclose()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.engine.store.close()
        for aclose in reversed(self._storage):
            await aclose()
        for close in reversed(self._closers):
            close()
        self.incidents.close()


async def _purge_workspace(workspace: SqliteWorkspace) -> None:
    interval = min(3600.0, max(workspace.ttl_seconds / 10, 1.0))
    failures = 0
    while True:
        await asyncio.sleep(interval)
        try:
            purged = await workspace.purge()
        except Exception:  # the next round tries again
            failures += 1
            log.exception("workspace purge failed (%d time(s) so far)", failures)
        else:
            if purged:
                log.info("purged %d expired workspace entries", purged)


def build_app(cfg: Config, engine: TaskEngine, catalog: SkillCatalog,
              metrics: ButlerMetrics, public_url: Callable[[], str] | None = None,
              push: PushService | None = None) -> web.Application:
    """The middleware stack, outermost first: count, map errors to JSON, limit per
    address, cap in-flight requests, authenticate, limit per caller."""
    verifier = TokenVerifier(cfg.a2a.tokens)
    rl = cfg.rate_limits
    app = web.Application(
        client_max_size=cfg.limits.max_body_bytes,
        middlewares=[
            metrics_middleware(metrics),
            error_middleware,
            gate_middleware(
                verifier=verifier, public_paths=PUBLIC_PATHS,
                max_inflight=cfg.limits.max_inflight,
                per_address=_buckets(rl.per_address_per_second, rl.per_address_burst),
                per_caller=_buckets(rl.per_caller_per_second, rl.per_caller_burst)),
        ],
    )
    if cfg.metrics.enabled and not cfg.metrics.listen:
        app.add_routes([metrics_route(metrics)])
    rest = RestBinding(engine, RestLimits(cfg.limits.max_json_depth,
                                          cfg.limits.body_timeout_seconds,
                                          cfg.tasks.max_page_size))
    app.add_routes(rest.routes())
    a2a_routes, app[ERROR_RENDERERS] = standard_a2a(
        cfg, engine, catalog, public_url or (lambda: cfg.public_url), push)
    app.add_routes(a2a_routes)

    async def healthz(request: web.Request) -> web.Response:
        return json_response({"status": "ok", "agent_id": cfg.agent.id})

    app.add_routes([web.get("/healthz", healthz)])
    return app


def _buckets(rate: float, burst: float) -> TokenBuckets | None:
    return TokenBuckets(rate, max(burst, 1.0)) if rate > 0 else None


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def server_tls(cfg: Config) -> ssl.SSLContext | None:
    if cfg.a2a.tls is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cfg.a2a.tls.cert_file, cfg.a2a.tls.key_file)
    return context
