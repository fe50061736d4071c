"""EdDSA: an agent's Ed25519 identity key, the public half others pin, and the compact JWS
(``base64url(header).base64url(payload).base64url(signature)``) the key signs.

A key is named by its RFC 7638 JWK thumbprint (``kid``): the same key has the same name
wherever it is seen, and a name can be checked against the key it names.

The JWS is written out rather than taken from a JWT library: the payload must be the exact
canonical bytes given (a JWT layer re-serialises a dict), and EdDSA over those bytes is
one call into ``cryptography``.
"""

from __future__ import annotations

import base64
import binascii
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

from internal.protocol.a2a.model import RequestError
from internal.signing._canonical import canonical

ALG = "EdDSA"


class BadSignature(RequestError, ValueError):
    """A signature, key or JWS that does not check out, with what is wrong."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid_signature", message)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    if "=" in text or any(c in text for c in "+/"):
        raise BadSignature("not unpadded base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise BadSignature("not base64url") from None


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
        return b64url(hashlib.sha256(canonical(self.jwk)).digest())

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


def sign_jws(key: IdentityKey, payload: bytes, header: dict[str, Any]) -> str:
    """The compact JWS of ``payload``; ``header`` gets ``alg`` and ``kid``."""
    return sign_protected(key, payload, protected_header(key, header))


def protected_header(key: IdentityKey, header: dict[str, Any]) -> str:
    """The first part of a JWS by ``key`` with ``header``: made once by a signer that
    signs many payloads under the same header (``sign_protected``)."""
    return b64url(canonical({**header, "alg": ALG, "kid": key.kid}))


def sign_protected(key: IdentityKey, payload: bytes, protected: str) -> str:
    """The compact JWS of ``payload`` under ``protected`` (``protected_header``)."""
    body = b64url(payload)
    signature = key.sign(f"{protected}.{body}".encode("ascii"))
    return f"{protected}.{body}.{b64url(signature)}"


def _header(protected: str) -> dict[str, Any]:
    try:
        header = json.loads(unb64url(protected))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BadSignature("the protected header is not JSON") from None
    if not isinstance(header, dict):
        raise BadSignature("the protected header is not a JSON object")
    if header.get("alg") != ALG:
        raise BadSignature(f"alg {header.get('alg')!r} is not {ALG}")
    return header


def jws_payload(jws: str) -> tuple[dict[str, Any], bytes]:
    """The header and payload of a compact JWS, unchecked (see ``verify_jws``)."""
    parts = jws.split(".") if isinstance(jws, str) else []
    if len(parts) != 3:
        raise BadSignature("not a compact JWS (three base64url parts)")
    return _header(parts[0]), unb64url(parts[1])


def jws_claims(jws: str, typ: str) -> dict[str, Any]:
    """The JSON object a JWS of type ``typ`` carries, unchecked (see ``verify_jws``)."""
    header, raw = jws_payload(jws)
    if header.get("typ") != typ:
        raise BadSignature(f"not a {typ}")
    try:
        claims = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BadSignature(f"a {typ}'s payload is not JSON") from None
    if not isinstance(claims, dict):
        raise BadSignature(f"a {typ}'s payload is not an object")
    return claims


def verify_jws(jws: str, key: PublicKey, *, payload: bytes | None = None) -> bytes:
    """The payload, once the signature checks with ``key``; with ``payload``, the JWS is
    a detached one (its middle part empty, as a card's signature is) over those bytes."""
    parts = jws.split(".") if isinstance(jws, str) else []
    if len(parts) != 3:
        raise BadSignature("not a compact JWS (three base64url parts)")
    protected, body, signature = parts
    header = _header(protected)
    if header.get("kid") not in (None, key.kid):
        raise BadSignature(f"signed by key {header.get('kid')}, not {key.kid}")
    if payload is not None:
        body = b64url(payload)
    decoded = unb64url(body)  # BadSignature for anything but base64url, before it is signed
    key.verify(unb64url(signature), f"{protected}.{body}".encode("ascii"))
    return decoded
