"""The standard A2A bindings of one daemon: well-known card, JSON-RPC, HTTP+JSON; and
the JSON-RPC dispatcher alone, for carriers other than HTTP (``butler stdio``)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from butler.card import build_a2a_card
from butler.config.model import Config
from butler.identity.key_file import AgentIdentity
from butler.skills.catalog import SkillCatalog
from internal.http import ErrorRenderer
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


def a2a_operations(cfg: Config, service: TaskService, catalog: SkillCatalog,
                   url: Callable[[], str], push: PushService | None = None,
                   agent: AgentIdentity | None = None) -> A2AOperations:
    """The A2A semantics over the engine; the card is built per request from live state,
    and signed with ``agent``'s key."""

    def card(identity: Identity | None) -> CardInfo:
        return build_a2a_card(cfg, catalog, identity, url(), agent)

    return A2AOperations(service, push, card)


def jsonrpc_dispatcher(cfg: Config, ops: A2AOperations) -> JsonRpcDispatcher:
    return JsonRpcDispatcher([V1Dialect(ops), V03Dialect(ops)],
                             max_json_depth=cfg.limits.max_json_depth)


def standard_a2a(cfg: Config, service: TaskService, catalog: SkillCatalog,
                 url: Callable[[], str], push: PushService | None = None,
                 agent: AgentIdentity | None = None,
                 ) -> tuple[list[web.RouteDef], list[ErrorRenderer]]:
    """Routes and error renderers."""
    ops = a2a_operations(cfg, service, catalog, url, push, agent)
    jsonrpc = JsonRpcBinding(
        [V1Dialect(ops), V03Dialect(ops)],
        JsonRpcLimits(cfg.limits.max_json_depth, cfg.limits.body_timeout_seconds))
    rest = A2ARestBinding(ops, max_json_depth=cfg.limits.max_json_depth,
                          body_seconds=cfg.limits.body_timeout_seconds)
    routes = CardRoute(ops.card).routes() + jsonrpc.routes() + rest.routes()
    return routes, [jsonrpc.render_error, rest.render_error]
