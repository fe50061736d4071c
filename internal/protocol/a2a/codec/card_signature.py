"""A2A 1.0 ``AgentCard.signatures``: a detached JWS (EdDSA) over the RFC 8785 canonical
card, and the card's identity key beside it in the swarm extension's params.

What is signed is the card as the A2A 1.0 schema reads it: without ``signatures``,
without the fields a 0.3 client reads (``url``, ``preferredTransport``... which a 1.0
parser drops), and without empty values (proto3 JSON omits them). That is the payload
the official a2a-sdk canonicalises and checks (``a2a.utils.signing``), so its verifier
and Butler's agree on every Butler card. docs/receipts.md shows how to check one by hand.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from internal.protocol.a2a.codec.swarm_envelope import SWARM_EXTENSION_URI
from internal.signing import (
    BadSignature,
    IdentityKey,
    NotCanonical,
    PublicKey,
    canonical,
    jws_payload,
    public_key_from_jwk,
    sign_jws,
    verify_jws,
)

# The top-level fields of A2A 1.0 ``AgentCard``, and the security scheme wrappers.
CARD_FIELDS = frozenset({
    "name", "description", "supportedInterfaces", "provider", "version", "documentationUrl",
    "capabilities", "securitySchemes", "securityRequirements", "defaultInputModes",
    "defaultOutputModes", "skills", "iconUrl"})
SCHEME_WRAPPERS = frozenset({
    "apiKeySecurityScheme", "httpAuthSecurityScheme", "oauth2SecurityScheme",
    "openIdConnectSecurityScheme", "mtlsSecurityScheme"})
KEY_PARAM = "identityKey"  # the public key, in the swarm extension's params
ROTATIONS_PARAM = "keyRotations"  # each old key's signature over its successor
AGENT_PARAM = "agentId"  # the agent id its receipts name (``agent``), signed with the card


def _without_empty(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: v for k, item in value.items() if (v := _without_empty(item)) is not None}
        return kept or None
    if isinstance(value, list):
        items = [v for item in value if (v := _without_empty(item)) is not None]
        return items or None
    if value is None or value == "":
        return None
    return value


def signed_view(card: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``card`` its signature covers (see the module's docstring)."""
    view = {k: v for k, v in card.items() if k in CARD_FIELDS}
    schemes = view.get("securitySchemes")
    if isinstance(schemes, dict):
        view["securitySchemes"] = {
            name: {k: v for k, v in s.items() if k in SCHEME_WRAPPERS}
            if isinstance(s, dict) else s for name, s in schemes.items()}
    return _without_empty(view) or {}


def signed_bytes(card: Mapping[str, Any]) -> bytes:
    try:
        return canonical(signed_view(card))
    except NotCanonical as exc:
        raise BadSignature(f"the card has no canonical form: {exc}") from None


@functools.lru_cache(maxsize=8)
def _signature(key: IdentityKey, payload: bytes) -> tuple[str, str]:
    """The card is built per request; the same card is signed once."""
    jws = sign_jws(key, payload, {"typ": "JOSE", "jwk": key.public.jwk})
    protected, _, signature = jws.split(".")
    return protected, signature


def sign_card(card: dict[str, Any], key: IdentityKey) -> dict[str, Any]:
    """``card`` with its one signature, by ``key``."""
    protected, signature = _signature(key, signed_bytes(card))
    return {**card, "signatures": [{"protected": protected, "signature": signature}]}


@functools.lru_cache(maxsize=8)
def card_signer(key: IdentityKey) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The same signer for the same key: cards built from the same facts compare equal."""
    return functools.partial(sign_card, key=key)


def claimed_key(card: Mapping[str, Any]) -> PublicKey | None:
    """The identity key the card names in the swarm extension's params, if any."""
    params = _swarm_params(card)
    return public_key_from_jwk(params[KEY_PARAM]) if KEY_PARAM in params else None


def claimed_agent(card: Mapping[str, Any]) -> str | None:
    """The agent id the card names in the swarm extension's params, if any."""
    found = _swarm_params(card).get(AGENT_PARAM)
    return found if isinstance(found, str) else None


def key_rotations(card: Mapping[str, Any]) -> tuple[str, ...]:
    found = _swarm_params(card).get(ROTATIONS_PARAM)
    return tuple(r for r in found if isinstance(r, str)) if isinstance(found, list) else ()


def _swarm_params(card: Mapping[str, Any]) -> dict[str, Any]:
    """The swarm extension's params on ``card``; empty when any level of it is missing or
    not of the right JSON type (a card is a peer's claim)."""
    caps = card.get("capabilities")
    extensions = caps.get("extensions") if isinstance(caps, dict) else None
    for ext in extensions if isinstance(extensions, list) else ():
        if isinstance(ext, dict) and ext.get("uri") == SWARM_EXTENSION_URI:
            params = ext.get("params")
            return params if isinstance(params, dict) else {}
    return {}


def verify_card(card: Mapping[str, Any]) -> PublicKey:
    """The key that signed ``card``; ``BadSignature`` (saying why) when it is unsigned,
    no signature checks, or the card names another identity key than the one that signed.

    The key comes from the card itself (the named key, else the signature's ``jwk``):
    this proves the card is whole and whose key signed it; whether that key is the one
    expected is the caller's pin to judge (key continuity)."""
    signatures = card.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise BadSignature("the card is not signed")
    named = claimed_key(card)
    payload = signed_bytes(card)
    why = "no signature on the card"
    for item in signatures:
        if not isinstance(item, dict):
            continue
        protected, signature = item.get("protected"), item.get("signature")
        if not isinstance(protected, str) or not isinstance(signature, str):
            why = "a signature lacks protected or signature"
            continue
        try:
            header, _ = jws_payload(f"{protected}..{signature}")
            key = named or public_key_from_jwk(header.get("jwk"))
            verify_jws(f"{protected}..{signature}", key, payload=payload)
        except BadSignature as exc:
            why = str(exc)
            continue
        return key
    raise BadSignature(f"the card's signature does not check: {why}")
