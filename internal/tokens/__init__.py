"""Bearer tokens: making one and the SHA-256 hex that configs hold instead of it.

A package of its own, importing only the standard library, so ``butler token new`` starts
without loading the HTTP stack.
"""

from __future__ import annotations

import hashlib
import secrets

__all__ = ["hash_token", "new_token"]


def hash_token(token: str | bytes) -> str:
    raw = token.encode("utf-8") if isinstance(token, str) else token
    return hashlib.sha256(raw).hexdigest()


def new_token() -> str:
    return secrets.token_hex(32)
