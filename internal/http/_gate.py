"""Every request's way in, as one middleware: limit per address, cap in-flight
requests, authenticate, limit per caller. One layer rather than four, because each
aiohttp middleware layer costs every request a coroutine and a handler wrapper.

Authentication is a bearer token (``TokenVerifier``, which the gRPC binding's gate uses
too): SHA-256 of the raw token, compared in constant time. Only hashes are ever held.
Every configured hash is compared on every request, so the time taken does not tell
which (or whether an early) entry matched."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from internal.http._json_http import IDENTITY, Handler
from internal.http._load_limits import INFLIGHT, LoadLimits, TokenBuckets, limited
from internal.protocol.a2a.model import AuthError, Identity, RequestError
from internal.tokens import hash_token as hash_token
from internal.tokens import new_token as new_token

MAX_AUTH_HEADER = 4096


@dataclass(frozen=True, slots=True)
class TokenEntry:
    digest: bytes
    identity: Identity


class TokenVerifier:
    def __init__(self, entries: Sequence[TokenEntry], *,
                 anonymous: Identity | None = None) -> None:
        """``anonymous``: who a request without ``Authorization`` is (None: refused). A
        request with a token that matches nothing is refused either way."""
        self.replace(entries, anonymous=anonymous)

    def replace(self, entries: Sequence[TokenEntry], *,
                anonymous: Identity | None = None) -> None:
        """The accepted tokens anew (a config reload): the next request is checked against
        these; requests already past the gate keep the identity they were given."""
        self._entries = tuple(entries)
        self._anonymous = anonymous

    def identify(self, authorization: str | None) -> Identity:
        """Map an ``Authorization`` header to an identity, or raise 401/400."""
        if authorization is None or authorization == "":
            if self._anonymous is not None:
                return self._anonymous
            raise AuthError("unauthenticated", "missing bearer token")
        if len(authorization) > MAX_AUTH_HEADER:
            raise RequestError("header_too_large", "authorization header too large")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthError("unauthenticated", "expected 'Authorization: Bearer <token>'")
        try:
            raw = token.encode("ascii")
        except UnicodeEncodeError:
            raise AuthError("unauthenticated", "invalid bearer token") from None
        digest = hashlib.sha256(raw).digest()
        found: Identity | None = None
        for entry in self._entries:
            if secrets.compare_digest(digest, entry.digest) and found is None:
                found = entry.identity
        if found is None:
            raise AuthError("unauthenticated", "invalid bearer token")
        return found


def gate_middleware(*, verifier: TokenVerifier, public_paths: Collection[str],
                    load_limits: LoadLimits, per_caller: TokenBuckets | None = None,
                    never_limited: Collection[str] = (),
                    inner_gate: Callable[[str], bool] | None = None) -> Any:
    """In this order: ``load_limits`` (the per-address limit, before auth so floods of bad
    tokens are limited too, then the in-flight cap: 503 with Retry-After instead of
    queueing; the daemon's gRPC binding shares it), the bearer token, then the caller's
    own bucket. ``never_limited`` paths (a health check) skip all of it. A request that
    becomes an event stream leaves the in-flight count (``_load_limits``).

    Nested gates (the agents one daemon hosts, each an app of its own behind the daemon's):
    the outer gate limits per address and caps in-flight requests, and leaves the paths
    ``inner_gate`` names to the inner one to authenticate; the inner gate (load limits
    with no cap and no per-address buckets) authenticates and limits per caller only."""
    public = frozenset(public_paths)
    exempt = frozenset(never_limited)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in exempt:
            return await handler(request)
        load_limits.address(request.remote or "?")
        slot = load_limits.enter()
        if slot is None:
            authenticate(request)
            return await handler(request)
        request[INFLIGHT] = slot
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
