"""Assembles one Butler instance from its config and runs its HTTP server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Tracer
from yarl import URL

from butler.a2a_wiring import serve_grpc
from butler.audit import AuditLog
from butler.audit.log import AuditWriter
from butler.audit.retention import ARCHIVE, retention_loop
from butler.card import build_card
from butler.catalog import CatalogRoute, ExposedAgent, publisher_for
from butler.config.loader import is_loopback
from butler.config.model import Config, http_url
from butler.delegation.peers import Discovery
from butler.delegation.registry_link import RegistryLink
from butler.edges.mcp_http import mount_mcp
from butler.engine.engine import TaskEngine
from butler.engine.run import Delegator, RunDeps
from butler.engine.store import SqliteTaskStore
from butler.engine.workspace import SqliteWorkspace
from butler.hosting.admin import AgentsAdmin
from butler.hosting.host import AgentHost
from butler.http_app import A2A_FRONT, PUBLIC_PATHS, build_app, server_tls
from butler.identity.key_file import AgentIdentity, load_identity
from butler.identity.receipt_log import ReceiptLog
from butler.identity.receipts import sealing
from butler.memory import MemoryStore
from butler.metrics import ButlerMetrics, observe_audit, serve_metrics
from butler.planner import Planner
from butler.push.service import PushNotifications
from butler.reload import LiveParts, reload_config
from butler.runtime.fd_limit import connection_budget, raise_fd_limit
from butler.skills.catalog import SkillCatalog, build_skills
from butler.skills.run_ledger import RunLedger
from butler.storage.data_folder import hold_data_folder
from butler.swarm.decision import SwarmPolicy
from butler.swarm.spend import SpendBook
from butler.telemetry.logs import quiet_refusals, redact_logs
from butler.telemetry.task_log import log_audit
from butler.telemetry.traces import build_tracer_provider, task_tracer
from internal.http import (
    INCIDENTS,
    IncidentLog,
    ListenSettings,
    OutboundGuard,
    Port,
    TcpFront,
    listen,
)
from internal.redaction import Redactor

log = logging.getLogger("butler.daemon")

RUNS_FOLDER = "runs"  # in data_dir: the command skills running now (butler/skills/run_ledger.py)
# The config, the tracer, where audit records go and the registry's peers (or None).
DelegatorFactory = Callable[[Config, Tracer, Callable[..., None], Discovery | None],
                            Delegator | None]


@dataclass
class Daemon:
    config: Config
    span_exporter: SpanExporter | None = None
    delegator_factory: DelegatorFactory | None = None
    port: int = 0
    push_guard: OutboundGuard | None = None  # tests: a guard that lets webhooks on loopback through
    clock: Callable[[], float] = time.time  # the wall clock of callers' spend windows
    # False: the engine alone, for a carrier that is not a port (``butler stdio``): no
    # listener, no metrics port, no registry announcement (there is no URL to announce).
    listen: bool = True
    # True: a hosted agent (butler/hosting), whose app the daemon's listener serves under
    # /{id}/: no listener, gRPC or metrics port of its own, but its own registry entry.
    hosted: bool = False
    grpc_port: int | None = field(default=None, init=False)  # bound, when gRPC is served
    # The gRPC port's front (its connections, and gRPC's own unix socket behind it).
    grpc_front: TcpFront | None = field(default=None, init=False)
    push: PushNotifications | None = field(default=None, init=False)
    engine: TaskEngine = field(init=False)
    catalog: SkillCatalog = field(init=False)
    tracer_provider: TracerProvider = field(init=False)
    tracer: Tracer = field(init=False)
    registry_link: RegistryLink = field(init=False)
    metrics: ButlerMetrics = field(default_factory=ButlerMetrics, init=False)
    incidents: IncidentLog = field(init=False)
    identity: AgentIdentity = field(init=False)  # the key that signs its card and receipts
    agents: AgentHost | None = field(default=None, init=False)  # the agents it hosts
    _app: web.Application | None = field(default=None, init=False)
    _stack: AsyncExitStack | None = field(default=None, init=False)
    _runner: web.AppRunner | None = field(default=None, init=False)
    # How its ports listen, worked out once (it raises the descriptor limit and fits the
    # connection caps to it, warning when it must lower them).
    _listen: ListenSettings | None = field(default=None, init=False)
    _url: str = field(default="", init=False)  # once the port is bound: it no longer changes
    _live: LiveParts | None = field(default=None, init=False)  # what a reload changes
    # What remote words go through before a task's error, an audit record or a log line.
    redact: Redactor = field(init=False)

    def __post_init__(self) -> None:
        self.redact = Redactor(self.config.secret_values())

    def _record(self, audit: AuditWriter, kind: str, fields: dict[str, Any]) -> None:
        """The one place every audit record passes: the trail, the metrics and the log."""
        if self.redact:
            fields = _redacted(fields, self.redact)
        audit.submit(kind, fields)
        observe_audit(self.metrics, kind, fields)
        log_audit(kind, fields)

    @property
    def url(self) -> str:
        a2a = self.config.a2a
        return self._url or self.config.agent.url or http_url(
            a2a.bind_address, self.port, tls=a2a.tls is not None)

    @property
    def app(self) -> web.Application:
        assert self._app is not None, "the daemon is not started"
        return self._app

    @property
    def grpc_url(self) -> str | None:
        """``host:port`` of the gRPC binding (the form gRPC channels take), on the host
        peers reach the HTTP port at."""
        if self.grpc_port is None:
            return None
        host = URL(self.url).raw_host or self.config.a2a.bind_address
        return f"[{host}]:{self.grpc_port}" if ":" in host else f"{host}:{self.grpc_port}"

    def load(self) -> int:
        """Its requests in flight (HTTP and gRPC), running tasks and open connections (HTTP
        and gRPC) now, from the pools that count them: what ``butler serve``'s heap keeper
        samples (butler/runtime/heap.py)."""
        app, server = self._app, self._runner.server if self._runner is not None else None
        return ((app[A2A_FRONT].load_limits.inflight if app is not None else 0)
                + self.engine.running
                + (len(server.connections) if server is not None else 0)
                + (self.grpc_front.connections.in_use if self.grpc_front is not None else 0))

    async def start(self) -> None:
        """Start every part, or, when one fails, stop the ones already started (in
        reverse order) and raise: a failed start leaves no thread, task or file open."""
        async with AsyncExitStack() as stack:
            await self._assemble(stack)
            self._stack = stack.pop_all()

    async def reload(self, load: Callable[[], Config]) -> bool:
        """Re-read the config (``load``) into the running daemon (butler/reload.py); False
        when it was refused and the running config kept."""
        if self._live is None:
            return False
        old = self.config
        self.config = await reload_config(old, load, self._live)
        return self.config is not old

    async def stop(self) -> None:
        """Stop what ``start`` started, in reverse order: the listener and the registry
        first, then the running tasks (for up to ``shutdown_grace_seconds``), the stores
        last, and the data folder's lock with them."""
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    async def _assemble(self, stack: AsyncExitStack) -> None:
        """Each part is pushed onto ``stack`` as soon as it exists, with what undoes it."""
        cfg = self.config
        self._url = ""  # a restart binds a port anew
        # First: a second daemon on this folder must stop before it opens any database.
        stack.enter_context(hold_data_folder(cfg.data_dir))
        agent = self.identity = load_identity(cfg.data_dir)
        # Then, before any skill can run: what command skills of a crashed daemon left.
        runs = RunLedger(cfg.data_dir / RUNS_FOLDER)
        runs.end_leftovers()
        memory = await MemoryStore.open(cfg.data_dir / "memory.db",
                                        cfg.shares.memory_entries)
        stack.push_async_callback(memory.close)
        skills = build_skills(cfg.skills, memory, runs, cfg.secret_env)
        catalog = self.catalog = SkillCatalog(skills, cfg.mcp_server.allowed_capabilities)
        if any(s.mcp is not None for s in cfg.skills):
            # Imported here: the MCP SDK is an optional extra (the config checked it is there).
            from butler.skills.mcp_servers import start_servers, stop_servers

            # Ended after the engine has stopped (the stack unwinds in reverse).
            stack.push_async_callback(stop_servers, await start_servers(cfg.skills, catalog,
                                                                       cfg.secret_env))
        audit_log = await AuditLog.open(cfg.data_dir / "audit.db",
                                        segment_records=cfg.audit.segment_records)
        stack.push_async_callback(audit_log.db.close)
        self.metrics.delegation_history = audit_log.delegations_since
        audit = AuditWriter(audit_log)
        stack.push_async_callback(audit.close)  # closed before the log: flushes into it
        if cfg.audit.retention_days > 0:
            retention = asyncio.create_task(retention_loop(
                audit_log, cfg.audit.retention_days, cfg.data_dir / ARCHIVE))
            stack.push_async_callback(_cancel, retention)  # stopped before the log
        self.tracer_provider = build_tracer_provider(cfg.telemetry, cfg.agent.id,
                                                     self.span_exporter)
        # Each agent is a service of its own in traces (``butler-<id>``); an exporter handed
        # in is the daemon's, shut down by it, not by the agents it hosts.
        if not (self.hosted and self.span_exporter is not None):
            stack.callback(self.tracer_provider.shutdown)
        self.tracer = task_tracer(self.tracer_provider, exporting=self.span_exporter is not None
                                  or cfg.telemetry.exporter != "none")
        store = await SqliteTaskStore.open(cfg.data_dir / "tasks.db",
                                           log=ReceiptLog(cfg.agent.id, lambda: agent.key))
        stack.push_async_callback(store.close)
        # Closed after the engine has stopped: the last tasks settle into it.
        spend = await SpendBook.open(cfg.a2a.caller_limits, cfg.data_dir, self.clock)
        stack.push_async_callback(spend.close)
        self.metrics.spend_usage = spend.usage
        workspace = await SqliteWorkspace.open(cfg.data_dir / "workspace.db",
                                               cfg.swarm.workspace_ttl_hours)
        stack.push_async_callback(workspace.close)
        planner = Planner(cfg.planner) if cfg.planner is not None else None
        if planner is not None:
            stack.push_async_callback(planner.aclose)
        deps = RunDeps(
            agent_id=cfg.agent.id,
            tracer=self.tracer,
            audit=lambda kind, **f: self._record(audit, kind, f),
            audit_room=audit.room,
            max_children=cfg.swarm.max_children_per_task,
            running_tasks=cfg.shares.running_tasks,
            redact=self.redact,
            input_wait_seconds=cfg.swarm.input_wait_seconds,
            workspace=workspace,
            planner=planner,
            seal=lambda task: sealing(task, cfg.agent.id, self.url),
        )
        self.registry_link = RegistryLink(cfg, lambda: build_card(cfg, catalog, None, self.url,
                                                                  agent),
                                          lambda: self.url)
        stack.push_async_callback(self.registry_link.close)
        delegator = None
        # swarm.enabled: false keeps every admission check but never delegates.
        if self.delegator_factory is not None and cfg.swarm.enabled:
            delegator = self.delegator_factory(cfg, self.tracer, deps.audit,
                                               self.registry_link.discovery)
            if delegator is not None:
                stack.push_async_callback(delegator.aclose)
        self.engine = TaskEngine(
            deps, store=store, catalog=catalog,
            policy=SwarmPolicy(
                cfg.agent.id, cfg.swarm.max_depth, cfg.swarm.budget_usd,
                cfg.swarm.routing_threshold, cfg.swarm.routing_semantic,
                cfg.planner.when if cfg.planner else "never",
                cfg.planner.shortlist if cfg.planner else 8),
            delegator=delegator, retention_hours=cfg.tasks.retention_hours,
            default_timeout=cfg.tasks.default_timeout_seconds,
            card=lambda ident: build_card(cfg, catalog, ident, self.url, agent), spend=spend,
        )
        self.metrics.running_tasks = self.engine.running_by_state
        self.push = PushNotifications(cfg.a2a.push_notifications, self.engine, cfg.data_dir,
                                      self.push_guard, cfg.shares.push_configs)
        stack.push_async_callback(self.push.aclose)
        runner = await self._http_app(stack, catalog) \
            if self.listen and not self.hosted else None
        if self.hosted:
            await self._hosted_app(stack, catalog)
        await self.push.start()
        await self.engine.start(audit_log)
        stack.push_async_callback(self.engine.stop, cfg.limits.shutdown_grace_seconds)
        stack.push_async_callback(_cancel, asyncio.create_task(
            _purge_workspace(workspace), name="workspace-purge"))
        if runner is None:
            if self.hosted:
                stack.push_async_callback(self.registry_link.stop)
                await self.registry_link.start()
            return
        assert runner.server is not None
        assert self._listen is not None
        server = await listen(runner.server, self._listen, self.incidents,
                              serving=False)
        stack.push_async_callback(_stop_serving, server, runner)
        self.port = server.sockets[0].getsockname()[1]
        self._url = self.url
        # The agents it hosts start on the bound port (their URLs name it) before it takes
        # a connection: one of the config's is never answered 404 for being asked early.
        self._live = LiveParts(
            runner.app[A2A_FRONT].verifier, spend, catalog, delegator,
            lambda new: build_skills(new.skills, memory, runs, new.secret_env), cfg.data_dir)
        assert self.agents is not None
        stack.push_async_callback(self.agents.close)  # before the listener stops
        await self.agents.start()
        server.start_serving()
        if cfg.a2a.bind_address in ("0.0.0.0", "::") and not cfg.agent.url:  # noqa: S104 -- a comparison, not a bind
            log.warning("bound to all interfaces without agent.url: peers and registries "
                        "would be told %s; set agent.url to the address peers use", self.url)
        if cfg.a2a.anonymous_tier is not None:
            log.warning("anonymous callers allowed (configurations.a2a.anonymous): anyone who "
                        "can reach %s may call without a token, as tier %r", self.url,
                        cfg.a2a.anonymous_tier)
        if not is_loopback(cfg.a2a.bind_address):
            log.warning("listening on %s: put TLS in front (a reverse proxy) before exposing "
                        "it beyond this machine", cfg.a2a.bind_address)
        log.info("butler %s listening on %s", cfg.agent.id, self.url)
        if cfg.a2a.grpc_port is not None:
            await self._serve_grpc(stack, runner.app)
        if cfg.metrics.enabled and cfg.metrics.listen:
            stack.push_async_callback(await serve_metrics(self.metrics, cfg.metrics.listen,
                                                          self.incidents))
        stack.push_async_callback(self.registry_link.stop)
        await self.registry_link.start()

    async def _serve_grpc(self, stack: AsyncExitStack, app: web.Application) -> None:
        """After the HTTP listener (the card names its URL), stopped before it; the same
        operations, verifier and load limits as the HTTP bindings."""
        cfg = self.config
        assert self._listen is not None
        server = await serve_grpc(cfg, app[A2A_FRONT], self._listen, self.incidents)
        self.grpc_port = server.port
        self.grpc_front = server.front
        stack.push_async_callback(server.stop, cfg.limits.shutdown_grace_seconds)
        log.info("butler %s serving A2A gRPC on %s", cfg.agent.id, self.grpc_url)

    def _incident_log(self, stack: AsyncExitStack, app: web.Application) -> None:
        self.incidents = IncidentLog(logging.getLogger("butler.http"))
        stack.callback(self.incidents.close)
        if not self.hosted:  # the loggers are the process's: the daemon's own holds them
            stack.callback(quiet_refusals(self.incidents))
            if self.redact:
                stack.callback(redact_logs(self.redact))
        app[INCIDENTS] = self.incidents

    async def _hosted_app(self, stack: AsyncExitStack, catalog: SkillCatalog) -> None:
        """A hosted agent's app: frozen and started here, as no runner of its own does it."""
        app = self._app = build_app(self.config, self.engine, catalog, self.metrics,
                                    lambda: self.url, self.push, agent=self.identity,
                                    hosted=True)
        self._incident_log(stack, app)
        app.freeze()
        await app.startup()
        stack.push_async_callback(app.cleanup)

    def _spawn(self, config: Config) -> Daemon:
        """A hosted agent's daemon: the same telemetry exporter, delegation, push guard and
        clock as this one's."""
        return Daemon(config, span_exporter=self.span_exporter,
                      delegator_factory=self.delegator_factory, push_guard=self.push_guard,
                      clock=self.clock, hosted=True)

    def _listen_settings(self) -> ListenSettings:
        cfg = self.config
        return ListenSettings(
            host=cfg.a2a.bind_address, port=cfg.a2a.port,
            max_connections=connection_budget(cfg.limits.max_connections, raise_fd_limit(),
                                              grpc=cfg.a2a.grpc_port is not None),
            max_connections_per_address=cfg.limits.max_connections_per_address or None,
            header_timeout_seconds=cfg.limits.header_timeout_seconds,
            body_timeout_seconds=cfg.limits.body_timeout_seconds, tls=server_tls(cfg))

    async def _http_app(self, stack: AsyncExitStack, catalog: SkillCatalog) -> web.AppRunner:
        """The app, set up but not yet listening; its cleanup comes after the engine's."""
        cfg = self.config
        agents = self.agents = AgentHost(cfg, lambda: self.url, self._spawn, PUBLIC_PATHS)
        admin = AgentsAdmin(agents, cfg.limits.max_json_depth, cfg.limits.body_timeout_seconds)
        app = self._app = build_app(cfg, self.engine, catalog, self.metrics, lambda: self.url,
                                    self.push, lambda: self.grpc_url, self.identity,
                                    inner_gate=agents.inner_gate, admin_routes=admin.routes())
        self._incident_log(stack, app)
        mcp = await mount_mcp(app, stack, cfg, self.engine, catalog)  # before the app is frozen
        app.add_routes(CatalogRoute(cfg.agent.name,
                                    lambda: publisher_for(cfg.agent.publisher, self.url),
                                    lambda: self._exposed(catalog, mcp=mcp)).routes())
        agents.mount(app)  # last: the daemon's own routes come first
        self._listen = self._listen_settings()
        runner = self._runner = web.AppRunner(
            app, handle_signals=False, shutdown_timeout=cfg.limits.shutdown_grace_seconds,
            **self._listen.handler_args(),
        )
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        return runner


    def _exposed(self, catalog: SkillCatalog, *, mcp: bool) -> list[ExposedAgent]:
        """The agents its AI catalog lists: its own, then each hosted one, as their
        public cards show them."""
        found = [ExposedAgent(build_card(self.config, catalog, None, self.url, self.identity),
                              self.url, self.identity, mcp)]
        for agent_id, hosted in (self.agents.running if self.agents else {}).items():
            assert self.agents is not None
            url = self.agents.agent_url(agent_id)
            found.append(ExposedAgent(build_card(hosted.daemon.config, hosted.daemon.catalog,
                                                 None, url, hosted.daemon.identity),
                                      url, hosted.daemon.identity))
        return found


async def _stop_serving(server: Port, runner: web.AppRunner) -> None:
    """No new connections; idle keep-alive ones close now, busy ones after their
    response (for up to the runner's shutdown timeout)."""
    server.close()
    if runner.server is not None:
        runner.server.pre_shutdown()
    await runner.shutdown()


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


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


def _redacted(fields: dict[str, Any], redact: Redactor) -> dict[str, Any]:
    """An audit record's text (and its detail's) without a configured secret's fragments."""
    out = {k: redact(v) if isinstance(v, str) else v for k, v in fields.items()}
    if isinstance(detail := out.get("detail"), dict):
        out["detail"] = _redacted(detail, redact)
    return out
