"""Ed25519 identity keys and compact JWS (RFC 7515, ``alg`` EdDSA, RFC 8037): what signs
an agent card and a task's receipt, and what checks them. Bearer tokens stay the only
authentication; these say who answered and what it cost."""

from internal.signing import _merkle as merkle
from internal.signing._canonical import Encoded, NotCanonical, canonical
from internal.signing._eddsa import (
    BadSignature,
    IdentityKey,
    PublicKey,
    b64url,
    jws_claims,
    jws_payload,
    protected_header,
    public_key_from_jwk,
    sign_jws,
    sign_protected,
    unb64url,
    verify_jws,
)
from internal.signing._rotation import rotated_to, rotation_statement

__all__ = [
    "BadSignature",
    "Encoded",
    "IdentityKey",
    "NotCanonical",
    "PublicKey",
    "b64url",
    "canonical",
    "jws_claims",
    "jws_payload",
    "merkle",
    "protected_header",
    "public_key_from_jwk",
    "rotated_to",
    "rotation_statement",
    "sign_jws",
    "sign_protected",
    "unb64url",
    "verify_jws",
]
