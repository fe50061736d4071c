"""An agent's identity key (Ed25519) and the public half others pin.

A key is named by its RFC 7638 JWK thumbprint (``kid``): the same key has the same name
wherever it is seen, and a name can be checked against the key it names.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from internal.signing._jws import BadSignature, b64url, unb64url


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


@dataclass(frozen=True)
class PublicKey:
    """The public half: what a card carries and a caller pins."""

    key: Ed25519PublicKey

    @functools.cached_property
    def jwk(self) -> dict[str, str]:
        return {"kty": "OKP", "crv": "Ed25519", "x": b64url(_raw_public(self.key))}

    @functools.cached_property
    def kid(self) -> str:
        """RFC 7638 thumbprint: SHA-256 of the required members, sorted, no whitespace."""
        members = json.dumps(self.jwk, sort_keys=True, separators=(",", ":")).encode()
        return b64url(hashlib.sha256(members).digest())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and other.jwk == self.jwk

    def __hash__(self) -> int:
        return hash(self.jwk["x"])

    def verify(self, signature: bytes, data: bytes) -> None:
        try:
            self.key.verify(signature, data)
        except InvalidSignature:
            raise BadSignature("the signature does not match the key") from None


def public_key_from_jwk(jwk: Any) -> PublicKey:
    """``BadSignature`` for anything but an Ed25519 OKP JWK."""
    if not isinstance(jwk, dict) or jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519" \
            or not isinstance(jwk.get("x"), str):
        raise BadSignature("not an Ed25519 public key (JWK kty OKP, crv Ed25519)")
    try:
        return PublicKey(Ed25519PublicKey.from_public_bytes(unb64url(jwk["x"])))
    except ValueError:
        raise BadSignature("the key's x is not 32 bytes of base64url") from None


@dataclass(frozen=True)
class IdentityKey:
    """The private key; ``private_jwk`` is what the key file keeps."""

    key: Ed25519PrivateKey

    @classmethod
    def generate(cls) -> IdentityKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_jwk(cls, jwk: dict[str, Any]) -> IdentityKey:
        if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519" or \
                not isinstance(jwk.get("d"), str):
            raise ValueError("not an Ed25519 private key (JWK kty OKP, crv Ed25519, d)")
        key = cls(Ed25519PrivateKey.from_private_bytes(unb64url(jwk["d"])))
        if jwk.get("x") not in (None, key.public.jwk["x"]):
            raise ValueError("the key's x does not match its d")
        return key

    @functools.cached_property
    def public(self) -> PublicKey:
        return PublicKey(self.key.public_key())

    @functools.cached_property
    def kid(self) -> str:
        return self.public.kid

    @property
    def private_jwk(self) -> dict[str, str]:
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        raw = self.key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return {**self.public.jwk, "d": b64url(raw)}

    def sign(self, data: bytes) -> bytes:
        return self.key.sign(data)
