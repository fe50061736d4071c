"""The standard A2A bindings of one daemon: well-known card, JSON-RPC, HTTP+JSON, gRPC
(the ``grpc`` extra, when ``grpc_port`` is set); and the JSON-RPC dispatcher alone, for
carriers other than HTTP (``butler stdio``).

An agent's ``A2AFront`` is built once (``build_app``) and every carrier serves the same
one: the same operations and dispatcher, the same token verifier, and the same
load limits, per-caller buckets and stream caps, so a caller's limits are one limit
whichever port it calls."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from aiohttp import web

from butler.card import build_a2a_card
from butler.config.model import Config
from butler.identity.key_file import AgentIdentity
from butler.skills.catalog import SkillCatalog
from internal.http import (
    ErrorRenderer,
    IncidentLog,
    ListenSettings,
    LoadLimits,
    RelayedPeers,
    StreamSlots,
    TokenBuckets,
    TokenVerifier,
)
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
    from internal.protocol.a2a.server.grpc_binding import GrpcServer

GrpcUrl = Callable[[], str | None]


def _no_grpc() -> None:
    return None


@dataclass(frozen=True)
class A2AFront:
    """One agent's A2A semantics and the gate in front of them, for every carrier."""
    ops: A2AOperations
    v1: V1Dialect  # the dialect gRPC carries (its methods are JSON-RPC 1.0's)
    dispatcher: JsonRpcDispatcher  # over ``v1`` and the 0.3 dialect
    verifier: TokenVerifier
    load_limits: LoadLimits
    per_caller: TokenBuckets | None
    streams: StreamSlots


def a2a_operations(cfg: Config, service: TaskService, catalog: SkillCatalog,
                   url: Callable[[], str], push: PushService | None = None,
                   grpc_url: GrpcUrl = _no_grpc,
                   agent: AgentIdentity | None = None, tenant: str = "") -> A2AOperations:
    """The A2A semantics over the engine; the card is built per request from live state,
    and signed with ``agent``'s key."""

    def card(identity: Identity | None) -> CardInfo:
        return build_a2a_card(cfg, catalog, identity, url(), grpc_url(), agent)

    return A2AOperations(service, push, card, tenant)


def jsonrpc_dispatcher(cfg: Config, ops: A2AOperations,
                       v1: V1Dialect | None = None) -> JsonRpcDispatcher:
    return JsonRpcDispatcher([v1 or V1Dialect(ops), V03Dialect(ops)],
                             max_json_depth=cfg.limits.max_json_depth)


def standard_a2a(cfg: Config, front: A2AFront,
                 ) -> tuple[list[web.RouteDef], list[ErrorRenderer]]:
    """Routes and error renderers of the HTTP bindings."""
    jsonrpc = JsonRpcBinding(front.dispatcher, JsonRpcLimits(cfg.limits.body_timeout_seconds))
    rest = A2ARestBinding(front.ops, max_json_depth=cfg.limits.max_json_depth,
                          body_seconds=cfg.limits.body_timeout_seconds)
    routes = CardRoute(front.ops.card).routes() + jsonrpc.routes() + rest.routes()
    return routes, [jsonrpc.render_error, rest.render_error]


async def serve_grpc(cfg: Config, front: A2AFront, listen: ListenSettings,
                     incidents: IncidentLog) -> GrpcServer:
    """The gRPC binding on ``bind_address:grpc_port``, with the HTTP listener's TLS, its
    ``front`` and its connection limits (``listen``: a pool of the same size, as each port
    has its own)."""
    from internal.protocol.a2a.server.grpc_binding import GrpcBinding, GrpcLimits, serve

    assert cfg.a2a.grpc_port is not None
    binding = GrpcBinding(front.v1, front.verifier, front.load_limits, streams=front.streams,
                          per_caller=front.per_caller, relayed=RelayedPeers(),
                          message_seconds=cfg.limits.body_timeout_seconds,
                          refusal_hold=cfg.limits.refusal_hold_seconds,
                          # Four calls for each connection the port may hold.
                          held_refusals=4 * cfg.limits.max_connections)
    tls = None if cfg.a2a.tls is None else (cfg.a2a.tls.cert_file.read_bytes(),
                                            cfg.a2a.tls.key_file.read_bytes())
    limits = GrpcLimits(max_message_bytes=cfg.limits.max_body_bytes,
                        handshake_seconds=cfg.limits.header_timeout_seconds,
                        idle_seconds=cfg.limits.header_timeout_seconds,
                        max_streams_per_connection=cfg.limits.max_streams_per_caller)
    return await serve(binding, replace(listen, port=cfg.a2a.grpc_port, tls=None), incidents,
                       limits=limits, tls=tls)
