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
from internal.http._origins import OriginPolicy
from internal.protocol.a2a.model import AuthError, Identity, RequestError
from internal.shares import ANONYMOUS
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
                    inner_gate: Callable[[str], bool] | None = None,
                    origins: OriginPolicy | None = None) -> Any:
    """In this order: the ``Host`` and ``Origin`` check (``origins``), the per-address
    limit (before auth, so floods of bad tokens are limited too), the bearer token and the
    caller's own bucket, then a place in the in-flight pool within the caller's share of
    it (``load_limits``, which the daemon's gRPC binding shares: 429 past the share, 503
    past the pool, with Retry-After instead of queueing). ``never_limited`` paths (a
    health check) skip all of it. A request that becomes an event stream leaves the
    in-flight count (``_load_limits``).

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
        if origins is not None:
            origins.check(request.headers)
        load_limits.address(request.remote or "?")
        if inner_gate is not None and inner_gate(request.path):
            caller = _unverified_caller(request.headers.get("Authorization"))
        else:
            caller = authenticate(request)
        slot = load_limits.enter(caller)
        if slot is None:
            return await handler(request)
        request[INFLIGHT] = slot
        try:
            return await handler(request)
        finally:
            slot.release()

    def authenticate(request: web.Request) -> str:
        """Who calls, as the shares count callers: unauthenticated requests (public
        paths, the anonymous tier) are one caller, ``ANONYMOUS``."""
        if request.path in public:
            return ANONYMOUS
        ident = verifier.identify(request.headers.get("Authorization"))
        request[IDENTITY] = ident
        if per_caller is not None:
            wait = per_caller.take(ident.name)
            if wait:
                raise limited("per caller", wait)
        return ident.name

    return middleware


def _unverified_caller(authorization: str | None) -> str:
    """A hosted agent's caller, before its own gate verifies the token: the token's digest
    stands for it (a made-up token holds its place only until that gate refuses it)."""
    if not authorization:
        return ANONYMOUS
    return "token:" + hashlib.sha256(authorization.encode("utf-8", "replace")).hexdigest()[:16]
