"""The registry's HTTP API: an aiohttp app over a ``RegistryStore``.

    PUT    /v1/agents/{name}             register or refresh  {card, url?, ttl_seconds?}
    POST   /v1/agents/{name}/heartbeat   extend the TTL       {ttl_seconds?}
    DELETE /v1/agents/{name}             deregister
    GET    /v1/agents/{name}             one live agent
    GET    /v1/agents?capability=&skill=&tag=&q=&limit=&cursor=
    GET    /healthz                      unauthenticated
    GET    /v1/openapi.json              unauthenticated: the OpenAPI document (openapi.yaml)
    GET    /dashboard                    unauthenticated: a page of the live agents, which
                                         reads GET /v1/agents with the token typed into it
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from aiohttp import web

from butler.dashboard import REGISTRY_PAGE
from butler.registry.ard_api import ARD, Ard, ard_background, ard_routes, render_ard_error
from butler.registry.card import build_entry, validate_card
from butler.registry.clock import Clock
from butler.registry.config import RegistryServiceConfig
from butler.registry.keys import check_key_change
from butler.registry.model import (
    bad,
    check_url,
    normalise_name,
    normalise_tag,
    normalise_term,
    query_words,
)
from butler.registry.store import AgentNotFound, NameOwned, Query, RegistryStore
from internal.http import (
    ERROR_RENDERERS,
    INCIDENTS,
    REFUSAL_HOLD,
    ErrorRenderer,
    IncidentLog,
    ListenSettings,
    LoadLimits,
    Port,
    TokenBuckets,
    TokenVerifier,
    document_route,
    error_middleware,
    gate_middleware,
    identity_of,
    json_response,
    limited,
    listen,
    read_json,
)
from internal.protocol.a2a.model import RequestError, Unavailable
from internal.shares import Share

log = logging.getLogger("butler.registry")

OPENAPI_PATH = "/v1/openapi.json"
_QUERY_KEYS = frozenset({"capability", "skill", "tag", "q", "limit", "cursor"})
_DEFAULT_PAGE = 50
# Room for the body's other fields and JSON punctuation beyond the card itself.
_BODY_OVERHEAD = 16 * 1024


@dataclass(frozen=True)
class Registry:
    config: RegistryServiceConfig
    store: RegistryStore
    clock: Clock
    # Per replica: with N replicas an identity may write N times the configured rate.
    write_limits: TokenBuckets


REGISTRY = web.AppKey("registry", Registry)


def build_registry_app(
    config: RegistryServiceConfig, store: RegistryStore, clock: Clock
) -> web.Application:
    """The store belongs to the caller, who closes it after the app has shut down."""
    app = web.Application(
        client_max_size=config.max_card_bytes + _BODY_OVERHEAD,
        middlewares=[
            error_middleware,
            gate_middleware(verifier=TokenVerifier(config.tokens),
                            public_paths={"/healthz", OPENAPI_PATH, *REGISTRY_PAGE.paths},
                            load_limits=LoadLimits(Share(config.max_inflight))),
        ],
    )
    app[REFUSAL_HOLD] = config.refusal_hold_seconds
    per_minute = config.max_writes_per_minute
    limits = TokenBuckets(rate=per_minute / 60, burst=per_minute, clock=clock.now)
    app[REGISTRY] = Registry(config, store, clock, limits)
    app[ARD] = Ard.build(config, store, clock)
    renderers: list[ErrorRenderer] = [render_ard_error]
    app[ERROR_RENDERERS] = renderers
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/agents", list_agents)
    app.router.add_put("/v1/agents/{name}", put_agent)
    app.router.add_get("/v1/agents/{name}", get_agent)
    app.router.add_delete("/v1/agents/{name}", delete_agent)
    app.router.add_post("/v1/agents/{name}/heartbeat", heartbeat)
    app.add_routes([document_route(OPENAPI_PATH, "butler.registry", "openapi.yaml"),
                    *REGISTRY_PAGE.routes(), *ard_routes()])
    app.cleanup_ctx.append(_sweeper)
    app.cleanup_ctx.append(ard_background)
    return app


async def _sweeper(app: web.Application) -> AsyncIterator[None]:
    reg = app[REGISTRY]
    task = asyncio.create_task(_sweep_forever(reg), name="registry-sweep")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _sweep_forever(reg: Registry) -> None:
    failures = 0
    while True:
        await asyncio.sleep(reg.config.sweep_interval_seconds)
        try:
            removed = await reg.store.sweep(now=reg.clock.now())
        except Exception as exc:  # the next round tries again
            failures += 1
            log.warning("registry sweep failed (%d time(s) so far): %s", failures, exc)
            continue
        if removed:
            log.debug("registry sweep removed %d expired agents", removed)


async def healthz(request: web.Request) -> web.Response:
    reg = request.app[REGISTRY]
    try:
        async with asyncio.timeout(2.0):
            # Not count_live: counting reads rows on the store's one thread, where
            # queries wait behind it, and load balancers ask every few seconds.
            await reg.store.ping()
    except (TimeoutError, Unavailable):
        raise Unavailable("overloaded", "registry store unavailable", retry_after=5) from None
    return json_response({"status": "ok"})


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text: how many agents are live now, the ARD index's size, what
    federation dropped (authenticated like the rest)."""
    reg = request.app[REGISTRY]
    live = await reg.store.count_live(now=reg.clock.now())
    ard = request.app[ARD]
    text = ("# HELP butler_registry_agents Live registered agents\n"
            "# TYPE butler_registry_agents gauge\n"
            f"butler_registry_agents {live}\n"
            "# HELP butler_registry_catalog_entries Catalog entries in the ARD index\n"
            "# TYPE butler_registry_catalog_entries gauge\n"
            f"butler_registry_catalog_entries {len(ard.index.entries)}\n"
            "# HELP butler_registry_catalog_quarantined Catalog entries held back, with a "
            "reason\n"
            "# TYPE butler_registry_catalog_quarantined gauge\n"
            f"butler_registry_catalog_quarantined {len(ard.index.quarantine)}\n"
            "# HELP butler_registry_federation_dropped_total Upstream results dropped, by "
            "why\n"
            "# TYPE butler_registry_federation_dropped_total counter\n"
            + "".join(f'butler_registry_federation_dropped_total{{reason="{why}"}} {n}\n'
                      for why, n in sorted(ard.federation.dropped.items())))
    return web.Response(text=text, content_type="text/plain", charset="utf-8")


async def put_agent(request: web.Request) -> web.Response:
    reg, owner, name = _write_prelude(request)
    body = await _body(request, reg, allowed={"card", "url", "ttl_seconds"})
    if "card" not in body:
        raise bad("card", "required")
    index = validate_card(body["card"], max_bytes=reg.config.max_card_bytes)
    url = check_url(body["url"], "url") if "url" in body else index.url
    if not url:
        raise bad("url", "required, in the body or as card.url")
    ttl = _ttl(body, reg.config)
    now = reg.clock.now()
    registered = await reg.store.get(name, now=now)
    if registered is not None and registered.owner != owner:
        raise NameOwned(name)  # the real reason, before any key is compared (issue 39)
    check_key_change(name, registered.card if registered is not None else None, index.card)
    entry = build_entry(name, owner, index, url=url, now=now, ttl_seconds=ttl)
    stored, created = await reg.store.upsert(
        entry, now=now, max_names=reg.config.max_names_per_identity
    )
    request.app[ARD].on_registered(stored)
    return json_response(stored.to_json(now), status=201 if created else 200)


async def heartbeat(request: web.Request) -> web.Response:
    reg, owner, name = _write_prelude(request)
    body = await _body(request, reg, allowed={"ttl_seconds"}) if request.body_exists else {}
    now = reg.clock.now()
    entry = await reg.store.heartbeat(name, owner, now=now, ttl_seconds=_ttl(body, reg.config))
    request.app[ARD].on_heartbeat(entry)
    return json_response(entry.to_json(now))


async def delete_agent(request: web.Request) -> web.Response:
    reg, owner, name = _write_prelude(request)
    force = identity_of(request).is_admin
    await reg.store.delete(name, owner, now=reg.clock.now(), force=force)
    request.app[ARD].on_deleted(name)
    return web.Response(status=204)


async def get_agent(request: web.Request) -> web.Response:
    reg = request.app[REGISTRY]
    name = normalise_name(request.match_info["name"])
    now = reg.clock.now()
    entry = await reg.store.get(name, now=now)
    if entry is None:
        raise AgentNotFound(name)
    return json_response(entry.to_json(now))


async def list_agents(request: web.Request) -> web.Response:
    reg = request.app[REGISTRY]
    params = _params(request)
    query = Query(
        capability=normalise_term(params["capability"], "capability")
        if "capability" in params else None,
        skill=normalise_term(params["skill"], "skill") if "skill" in params else None,
        tag=normalise_tag(params["tag"]) if "tag" in params else None,
        words=query_words(params.get("q", "")),
    )
    limit = _limit(params.get("limit"), reg.config.max_page_size)
    after = decode_cursor(params["cursor"]) if "cursor" in params else None
    now = reg.clock.now()
    entries, next_after = await reg.store.query(query, now=now, limit=limit, after=after)
    return json_response({
        "agents": [e.to_json(now) for e in entries],
        "next_cursor": encode_cursor(next_after) if next_after else None,
    })


def _write_prelude(request: web.Request) -> tuple[Registry, str, str]:
    """Every write is charged to its identity before anything else is looked at, so a
    flood of malformed requests is limited like a flood of good ones."""
    reg = request.app[REGISTRY]
    owner = identity_of(request).name
    wait = reg.write_limits.take(owner)
    if wait > 0:
        raise limited("registry writes", wait)
    return reg, owner, normalise_name(request.match_info["name"])


async def _body(request: web.Request, reg: Registry, *, allowed: set[str]) -> dict[str, Any]:
    body = await read_json(request, max_depth=32, body_seconds=reg.config.body_timeout_seconds)
    if not isinstance(body, dict):
        raise bad("body", "expected a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise bad(unknown[0][:64], f"unknown field (expected: {', '.join(sorted(allowed))})")
    return body


def _ttl(body: dict[str, Any], config: RegistryServiceConfig) -> int:
    value = body.get("ttl_seconds")
    if value is None:
        return config.default_ttl_seconds
    if isinstance(value, Decimal) and value.adjusted() < 9 and value == value.to_integral_value():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad("ttl_seconds", "expected a whole number of seconds")
    if not config.min_ttl_seconds <= value <= config.max_ttl_seconds:
        raise bad("ttl_seconds", f"must be between {config.min_ttl_seconds} and "
                  f"{config.max_ttl_seconds}, got {value}")
    return value


def _params(request: web.Request) -> dict[str, str]:
    params: dict[str, str] = {}
    for key, value in request.query.items():
        if key not in _QUERY_KEYS:
            expected = ", ".join(sorted(_QUERY_KEYS))
            raise bad(key[:64], f"unknown query parameter (expected: {expected})")
        if key in params:
            raise bad(key, "given more than once")
        params[key] = value
    return params


def _limit(raw: str | None, maximum: int) -> int:
    if raw is None:
        return min(_DEFAULT_PAGE, maximum)
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= maximum:
        raise bad("limit", f"expected a whole number from 1 to {maximum}")
    return int(raw)


def encode_cursor(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        name = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if len(cursor) <= 100 and normalise_name(name) == name:
            return name
    except (binascii.Error, UnicodeDecodeError, ValueError, RequestError):
        pass
    raise bad("cursor", "not a cursor this registry issued")


@dataclass
class RunningRegistry:
    runner: web.AppRunner
    server: Port

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def close(self) -> None:
        self.server.close()
        await self.runner.cleanup()


async def start_registry(config: RegistryServiceConfig, store: RegistryStore,
                         clock: Clock) -> RunningRegistry:
    """Serve on the shared listener: the connection cap, the header deadline, JSON
    answers to malformed HTTP and rate-limited incident logs, as the daemon has."""
    app = build_registry_app(config, store, clock)
    incidents = IncidentLog(logging.getLogger("butler.http"))
    app[INCIDENTS] = incidents
    settings = ListenSettings(host=config.bind_address, port=config.port,
                              body_timeout_seconds=config.body_timeout_seconds)
    runner = web.AppRunner(app, handle_signals=False, **settings.handler_args())
    await runner.setup()
    assert runner.server is not None
    try:
        server = await listen(runner.server, settings, incidents)
    except BaseException:
        await runner.cleanup()
        raise
    running = RunningRegistry(runner, server)
    app[ARD].bound(*running.address)
    return running
