"""Key continuity in the registry: the identity key registered with a name stays with it.

A card naming another key than the live entry's is refused (``key_change_refused``)
unless its ``key_rotations`` lead, each signed by the key before it, from the registered
key to the new one: only the holder of the old key can hand the name over. Like the
name's binding to its registrant, this lasts while the entry is live.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from butler.registry.model import bad
from internal.protocol.a2a.model import AuthError
from internal.signing import BadSignature, PublicKey, public_key_from_jwk, rotated_to


class KeyChangeRefused(AuthError):
    def __init__(self, name: str, why: str) -> None:
        super().__init__("key_change_refused", f"agent {name!r}: {why}")


def card_key(card: Mapping[str, Any]) -> PublicKey | None:
    """The card's ``identity_key``, checked to be an Ed25519 JWK (400 otherwise)."""
    if "identity_key" not in card:
        return None
    try:
        return public_key_from_jwk(card["identity_key"])
    except BadSignature as exc:
        raise bad("card.identity_key", str(exc)) from None


def rotations(card: Mapping[str, Any]) -> list[str]:
    found = card.get("key_rotations", [])
    if not isinstance(found, list) or len(found) > 64 or \
            not all(isinstance(r, str) and len(r) < 4096 for r in found):
        raise bad("card.key_rotations", "expected a list of at most 64 compact JWS strings")
    return found


def check_key_change(name: str, registered: Mapping[str, Any] | None,
                     card: Mapping[str, Any]) -> None:
    new = card_key(card)
    chain = rotations(card)
    old = card_key(registered) if registered is not None else None
    if old is None or (new is not None and new.kid == old.kid):
        return
    if new is None:
        raise KeyChangeRefused(name, f"the card names no identity key; key {old.kid} is "
                                     "registered with the name")
    if not rotated_to(old, new.kid, chain):
        raise KeyChangeRefused(name, f"key {new.kid} replaces the registered key {old.kid} "
                                     "without the old key's signature (butler key rotate)")
