"""Key rotation statements: the old key signs the new one, so whoever pinned the old key
can follow the chain to the new one, and nobody without the old key can start a chain."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from internal.signing._canonical import canonical
from internal.signing._eddsa import (
    BadSignature,
    IdentityKey,
    PublicKey,
    jws_claims,
    public_key_from_jwk,
    sign_jws,
    verify_jws,
)

ROTATION_TYPE = "butler-key-rotation+jws"


def rotation_statement(old: IdentityKey, new: PublicKey, at: str) -> str:
    payload = {"old_kid": old.kid, "new_kid": new.kid, "new_key": new.jwk, "at": at}
    return sign_jws(old, canonical(payload), {"typ": ROTATION_TYPE})


def _statement(jws: str) -> dict[str, Any]:
    return jws_claims(jws, ROTATION_TYPE)


def rotated_to(pinned: PublicKey, target_kid: str, statements: Iterable[str]) -> bool:
    """Whether ``statements`` lead, each signed by the key before it, from ``pinned`` to
    the key named ``target_kid``."""
    by_old: dict[str, str] = {}
    for jws in statements:
        try:
            by_old.setdefault(str(_statement(jws).get("old_kid")), jws)
        except BadSignature:
            continue
    current, seen = pinned, set[str]()
    while current.kid != target_kid:
        step = by_old.get(current.kid)
        if step is None or current.kid in seen:
            return False
        seen.add(current.kid)
        try:
            verify_jws(step, current)
            current = public_key_from_jwk(_statement(step).get("new_key"))
        except BadSignature:
            return False
    return True
