"""Compact JWS with EdDSA: ``base64url(header).base64url(payload).base64url(signature)``.

Written out rather than taken from a JWT library: the payload must be the exact
canonical bytes given (a JWT layer re-serialises a dict), and EdDSA over those bytes is
one call into ``cryptography``.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Protocol

from internal.protocol.a2a.model import RequestError

ALG = "EdDSA"


class Signer(Protocol):
    @property
    def kid(self) -> str: ...

    def sign(self, data: bytes) -> bytes: ...


class Verifier(Protocol):
    @property
    def kid(self) -> str: ...

    def verify(self, signature: bytes, data: bytes) -> None: ...


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


def sign_jws(key: Signer, payload: bytes, header: dict[str, Any]) -> str:
    """The compact JWS of ``payload``; ``header`` gets ``alg`` and ``kid``."""
    return sign_protected(key, payload, protected_header(key, header))


def protected_header(key: Signer, header: dict[str, Any]) -> str:
    """The first part of a JWS by ``key`` with ``header``: made once by a signer that
    signs many payloads under the same header (``sign_protected``)."""
    return b64url(json.dumps({**header, "alg": ALG, "kid": key.kid},
                             separators=(",", ":"), sort_keys=True).encode())


def sign_protected(key: Signer, payload: bytes, protected: str) -> str:
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


def verify_jws(jws: str, key: Verifier, *, payload: bytes | None = None) -> bytes:
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
