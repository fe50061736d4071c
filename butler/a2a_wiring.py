"""The standard A2A bindings of one daemon: well-known card, JSON-RPC, HTTP+JSON, gRPC
(the ``grpc`` extra, when ``grpc_port`` is set); and the JSON-RPC dispatcher alone, for
carriers other than HTTP (``butler stdio``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from butler.card import build_a2a_card
from butler.config.model import Config
from butler.identity.key_file import AgentIdentity
from butler.skills.catalog import SkillCatalog
from internal.http import ErrorRenderer, StreamSlots, TokenBuckets, TokenVerifier
from internal.protocol.a2a.model import CardInfo, Identity
from internal.protocol.a2a.server import (
    A2AOperations,
    A2ARestBinding,
    CardRoute,
    JsonRpcBinding,
    JsonRpcDispatcher,
    JsonRpcLimits,
    PushService,
    TaskService,
    V03Dialect,
    V1Dialect,
)

if TYPE_CHECKING:  # the grpc extra is optional: imported only when it is served
    import grpc

GrpcUrl = Callable[[], str | None]


def _no_grpc() -> None:
    return None


def a2a_operations(cfg: Config, service: TaskService, catalog: SkillCatalog,
                   url: Callable[[], str], push: PushService | None = None,
                   grpc_url: GrpcUrl = _no_grpc,
                   agent: AgentIdentity | None = None, tenant: str = "") -> A2AOperations:
    """The A2A semantics over the engine; the card is built per request from live state,
    and signed with ``agent``'s key."""

    def card(identity: Identity | None) -> CardInfo:
        return build_a2a_card(cfg, catalog, identity, url(), grpc_url(), agent)

    return A2AOperations(service, push, card, tenant)


def jsonrpc_dispatcher(cfg: Config, ops: A2AOperations) -> JsonRpcDispatcher:
    return JsonRpcDispatcher([V1Dialect(ops), V03Dialect(ops)],
                             max_json_depth=cfg.limits.max_json_depth)


def standard_a2a(cfg: Config, service: TaskService, catalog: SkillCatalog,
                 url: Callable[[], str], push: PushService | None = None,
                 grpc_url: GrpcUrl = _no_grpc, agent: AgentIdentity | None = None,
                 tenant: str = "") -> tuple[list[web.RouteDef], list[ErrorRenderer]]:
    """Routes and error renderers; ``tenant``: a hosted agent's id (docs/hosting.md)."""
    ops = a2a_operations(cfg, service, catalog, url, push, grpc_url, agent, tenant)
    jsonrpc = JsonRpcBinding(
        [V1Dialect(ops), V03Dialect(ops)],
        JsonRpcLimits(cfg.limits.max_json_depth, cfg.limits.body_timeout_seconds))
    rest = A2ARestBinding(ops, max_json_depth=cfg.limits.max_json_depth,
                          body_seconds=cfg.limits.body_timeout_seconds)
    routes = CardRoute(ops.card).routes() + jsonrpc.routes() + rest.routes()
    return routes, [jsonrpc.render_error, rest.render_error]


async def serve_grpc(cfg: Config, ops: A2AOperations, verifier: TokenVerifier,
                     streams: StreamSlots, per_caller: TokenBuckets | None,
                     ) -> tuple[grpc.aio.Server, int]:
    """The gRPC binding on ``bind_address:grpc_port``, with the HTTP listener's TLS, token
    verifier, per-caller limit and stream caps; the server and the port it bound."""
    from internal.protocol.a2a.server.grpc_binding import GrpcBinding, GrpcLimits, serve

    assert cfg.a2a.grpc_port is not None
    binding = GrpcBinding(V1Dialect(ops), verifier, streams=streams, per_caller=per_caller)
    tls = None if cfg.a2a.tls is None else (cfg.a2a.tls.cert_file.read_bytes(),
                                            cfg.a2a.tls.key_file.read_bytes())
    limits = GrpcLimits(max_message_bytes=cfg.limits.max_body_bytes,
                        max_concurrent_rpcs=cfg.limits.max_inflight)
    return await serve(binding, cfg.a2a.bind_address, cfg.a2a.grpc_port, limits=limits,
                       tls=tls)
