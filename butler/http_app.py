"""One agent's aiohttp app: its middlewares and every route it serves (/v2, the standard
A2A bindings, the card, the dashboard). The daemon's own agent gets the whole stack; a
hosted agent (``butler/hosting``) an app behind the daemon's, whose outer middlewares
already counted, limited and capped the request."""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Callable, Sequence

from aiohttp import web
from yarl import URL

from butler.a2a_wiring import A2AFront, a2a_operations, jsonrpc_dispatcher, standard_a2a
from butler.catalog import CATALOG_PATH
from butler.config.loader import is_loopback
from butler.config.model import Config
from butler.dashboard import DAEMON_PAGE
from butler.delegation.peers import PeerStatus
from butler.engine.engine import TaskEngine
from butler.identity.key_file import AgentIdentity
from butler.log_routes import PATHS as LOG_PATHS
from butler.log_routes import log_routes
from butler.metrics import ButlerMetrics, metrics_middleware, metrics_route
from butler.overview import Overview
from butler.skills.catalog import SkillCatalog
from internal.http import (
    ERROR_RENDERERS,
    REFUSAL_HOLD,
    STREAM_SLOTS,
    LoadLimits,
    OriginPolicy,
    StreamSlots,
    TokenBuckets,
    TokenVerifier,
    error_middleware,
    gate_middleware,
    host_name,
    json_response,
)
from internal.protocol.a2a.model import Identity
from internal.protocol.a2a.server import (
    BUTLER_V2_PATH,
    A2AOperations,
    PushService,
    RestBinding,
    RestLimits,
    V1Dialect,
)
from internal.shares import ANONYMOUS

PUBLIC_PATHS = ("/healthz", "/.well-known/agent-card.json", CATALOG_PATH, BUTLER_V2_PATH,
                *DAEMON_PAGE.paths,
                *LOG_PATHS)
A2A_FRONT = web.AppKey("butler.a2a_front", A2AFront)


def anonymous_identity(cfg: Config) -> Identity | None:
    """Who a request without a token is (None: refused)."""
    tier = cfg.a2a.anonymous_tier
    return None if tier is None else Identity(name=ANONYMOUS, tier=tier)


def token_verifier(cfg: Config) -> TokenVerifier:
    return TokenVerifier(cfg.a2a.tokens, anonymous=anonymous_identity(cfg))


def build_app(cfg: Config, engine: TaskEngine, catalog: SkillCatalog,
              metrics: ButlerMetrics, public_url: Callable[[], str] | None = None,
              push: PushService | None = None,
              grpc_url: Callable[[], str | None] | None = None,
              agent: AgentIdentity | None = None, *,
              inner_gate: Callable[[str], bool] | None = None,
              admin_routes: Sequence[web.RouteDef] = (), hosted: bool = False,
              ) -> web.Application:
    """The middleware stack, outermost first: count, map errors to JSON, limit per
    address, cap in-flight requests, authenticate, limit per caller. ``hosted``: a hosted
    agent's app, which only maps errors, authenticates and limits per caller; ``inner_gate``:
    whether a path goes to a hosted agent, which the daemon's gate leaves to its own
    (``AgentHost.inner_gate``)."""
    ops = a2a_operations(cfg, engine, catalog, public_url or (lambda: cfg.public_url), push,
                         grpc_url or (lambda: None), agent, cfg.agent.id if hosted else "")
    front = a2a_front(cfg, ops, hosted=hosted)
    gate = gate_middleware(
        verifier=front.verifier, public_paths=PUBLIC_PATHS, load_limits=front.load_limits,
        per_caller=front.per_caller, never_limited=("/healthz",),
        inner_gate=inner_gate, origins=None if hosted else origin_policy(cfg))
    app = web.Application(
        client_max_size=cfg.limits.max_body_bytes,
        middlewares=[error_middleware, gate] if hosted
        else [metrics_middleware(metrics), error_middleware, gate])
    app[A2A_FRONT] = front  # the gRPC port serves the same one
    app[REFUSAL_HOLD] = cfg.limits.refusal_hold_seconds
    app[STREAM_SLOTS] = front.streams
    if cfg.metrics.enabled and not cfg.metrics.listen and not hosted:
        app.add_routes([metrics_route(metrics)])
    rest = RestBinding(engine, RestLimits(cfg.limits.max_json_depth,
                                          cfg.limits.body_timeout_seconds,
                                          cfg.tasks.max_page_size))
    app.add_routes(rest.routes())
    app.add_routes(admin_routes)
    app.add_routes(log_routes(engine.store))
    a2a_routes, app[ERROR_RENDERERS] = standard_a2a(cfg, front)
    app.add_routes(a2a_routes)

    async def healthz(request: web.Request) -> web.Response:
        return json_response({"status": "ok", "agent_id": cfg.agent.id})

    async def peers() -> list[PeerStatus]:
        delegator = engine.delegator
        return [] if delegator is None else await delegator.peer_status()

    overview = Overview(cfg.agent.id, public_url or (lambda: cfg.public_url), peers,
                        lambda: engine.swarm.spend.limits, metrics, engine)
    app.add_routes([web.get("/healthz", healthz), *overview.routes(), *DAEMON_PAGE.routes()])
    return app


def a2a_front(cfg: Config, ops: A2AOperations, *, hosted: bool) -> A2AFront:
    """The agent's one dispatcher, verifier, load limits, per-caller buckets and stream caps.
    A hosted agent's load limits cap nothing and limit no address: the daemon's did."""
    rl = cfg.rate_limits
    load_limits = LoadLimits(None) if hosted else LoadLimits(
        cfg.shares.inflight, _buckets(rl.per_address_per_second, rl.per_address_burst))
    v1 = V1Dialect(ops)
    return A2AFront(
        ops, v1, jsonrpc_dispatcher(cfg, ops, v1), token_verifier(cfg), load_limits,
        _buckets(rl.per_caller_per_second, rl.per_caller_burst),
        StreamSlots(cfg.shares.streams))


def origin_policy(cfg: Config) -> OriginPolicy:
    """The names the daemon's listener answers to and the origins whose pages may call it
    (``internal.http._origins``)."""
    bind = cfg.a2a.bind_address
    names = {*cfg.a2a.public_hosts, bind}
    if cfg.agent.url:
        names.add(host_name(URL(cfg.agent.url).raw_authority))
    # A wildcard bind serves loopback too. bind_address is an IP address or "localhost".
    if is_loopback(bind) or ipaddress.ip_address(bind).is_unspecified:
        names.add("localhost")
    return OriginPolicy(names, cfg.a2a.allowed_origins)


def _buckets(rate: float, burst: float) -> TokenBuckets | None:
    return TokenBuckets(rate, max(burst, 1.0)) if rate > 0 else None


def server_tls(cfg: Config) -> ssl.SSLContext | None:
    if cfg.a2a.tls is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cfg.a2a.tls.cert_file, cfg.a2a.tls.key_file)
    return context
