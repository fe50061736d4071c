"""Every request's way in, as one middleware: limit per address, cap in-flight
requests, authenticate, limit per caller. One layer rather than four, because each
aiohttp middleware layer costs every request a coroutine and a handler wrapper."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from aiohttp import web

from internal.http._auth import TokenVerifier
from internal.http._json_http import IDENTITY, Handler
from internal.http._rate_limits import TokenBuckets, limited
from internal.http._streams import INFLIGHT, InflightSlot
from internal.protocol.a2a.model import Unavailable


def gate_middleware(*, verifier: TokenVerifier, public_paths: Collection[str],
                    max_inflight: int | None, per_address: TokenBuckets | None = None,
                    per_caller: TokenBuckets | None = None,
                    never_limited: Collection[str] = (),
                    inner_gate: Callable[[str], bool] | None = None) -> Any:
    """In this order: per-address limit (before auth, so floods of bad tokens are
    limited too), the in-flight cap (503 with Retry-After instead of queueing), the bearer
    token, then the caller's own bucket. ``never_limited`` paths (a health check) skip
    all of it. A request that becomes an event stream leaves the in-flight count
    (``_streams``).

    Nested gates (the agents one daemon hosts, each an app of its own behind the daemon's):
    the outer gate limits per address and caps in-flight requests, and leaves the paths
    ``inner_gate`` names to the inner one to authenticate; the inner gate
    (``max_inflight=None``, no ``per_address``) authenticates and limits per caller only."""
    public = frozenset(public_paths)
    exempt = frozenset(never_limited)
    inflight = 0

    def give_back() -> None:
        nonlocal inflight
        inflight -= 1

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        nonlocal inflight
        if request.path in exempt:
            return await handler(request)
        if per_address is not None:
            wait = per_address.take(request.remote or "?")
            if wait:
                raise limited("per address", wait)
        if max_inflight is None:
            authenticate(request)
            return await handler(request)
        if inflight >= max_inflight:
            raise Unavailable("overloaded", "too many requests in flight", retry_after=1)
        inflight += 1
        slot = request[INFLIGHT] = InflightSlot(give_back)
        try:
            if inner_gate is None or not inner_gate(request.path):
                authenticate(request)
            return await handler(request)
        finally:
            slot.release()

    def authenticate(request: web.Request) -> None:
        if request.path not in public:
            ident = verifier.identify(request.headers.get("Authorization"))
            request[IDENTITY] = ident
            if per_caller is not None:
                wait = per_caller.take(ident.name)
                if wait:
                    raise limited("per caller", wait)

    return middleware
