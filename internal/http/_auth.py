"""Bearer-token authentication: SHA-256 of the raw token, compared in constant time.

Only hashes are ever held. Every configured hash is compared on every request, so the
time taken does not tell which (or whether an early) entry matched.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

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
