"""The standard A2A bindings of one daemon: well-known card, JSON-RPC, HTTP+JSON."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from butler.card import build_a2a_card
from butler.config.model import Config
from butler.skills.catalog import SkillCatalog
from internal.protocol.a2a.a2a_model import CardInfo
from internal.protocol.a2a.a2a_ops import A2AOperations
from internal.protocol.a2a.a2a_rest import A2ARestBinding
from internal.protocol.a2a.auth import Identity
from internal.protocol.a2a.card_route import CardRoute
from internal.protocol.a2a.http_common import ErrorRenderer
from internal.protocol.a2a.jsonrpc import JsonRpcBinding, JsonRpcLimits
from internal.protocol.a2a.jsonrpc_v03 import V03Dialect
from internal.protocol.a2a.jsonrpc_v1 import V1Dialect
from internal.protocol.a2a.service import PushService, TaskService


def standard_a2a(cfg: Config, service: TaskService, catalog: SkillCatalog,
                 url: Callable[[], str], push: PushService | None = None,
                 ) -> tuple[list[web.RouteDef], list[ErrorRenderer]]:
    """Routes and error renderers; the card is built per request from live state."""

    def card(identity: Identity | None) -> CardInfo:
        return build_a2a_card(cfg, catalog, identity, url())

    ops = A2AOperations(service, push, card)
    jsonrpc = JsonRpcBinding(
        [V1Dialect(ops), V03Dialect(ops)],
        JsonRpcLimits(cfg.limits.max_json_depth, cfg.limits.body_timeout_seconds))
    rest = A2ARestBinding(ops, max_json_depth=cfg.limits.max_json_depth,
                          body_seconds=cfg.limits.body_timeout_seconds)
    routes = CardRoute(card).routes() + jsonrpc.routes() + rest.routes()
    return routes, [jsonrpc.render_error, rest.render_error]
