"""The A2A agent card on the wire: 1.0 (optionally with the 0.3 fields), and 0.3."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from internal.protocol.a2a.model import LEGACY_VERSION, PROTOCOL_VERSION, CardInfo

BEARER = "bearer"


def _interfaces(info: CardInfo) -> list[dict[str, str]]:
    grpc = [] if info.grpc_url is None else [
        {"url": info.grpc_url, "protocolBinding": "GRPC", "protocolVersion": PROTOCOL_VERSION}]
    return [
        {"url": info.jsonrpc_url, "protocolBinding": "JSONRPC",
         "protocolVersion": PROTOCOL_VERSION},
        {"url": info.rest_url, "protocolBinding": "HTTP+JSON",
         "protocolVersion": PROTOCOL_VERSION},
        *grpc,
        {"url": info.jsonrpc_url, "protocolBinding": "JSONRPC",
         "protocolVersion": LEGACY_VERSION},
    ]


def _skills(info: CardInfo) -> list[dict[str, Any]]:
    out = []
    for skill in info.skills:
        item: dict[str, Any] = {"id": skill.id, "name": skill.name,
                                "description": skill.description, "tags": list(skill.tags)}
        if skill.examples:
            item["examples"] = list(skill.examples)
        if skill.input_modes and skill.input_modes != info.input_modes:
            item["inputModes"] = list(skill.input_modes)
        if skill.output_modes and skill.output_modes != info.output_modes:
            item["outputModes"] = list(skill.output_modes)
        out.append(item)
    return out


def _extensions(info: CardInfo) -> list[dict[str, Any]]:
    out = []
    for ext in info.extensions:
        item: dict[str, Any] = {"uri": ext.uri, "description": ext.description}
        if ext.required:  # proto3 JSON leaves a false bool out, as a signed card must
            item["required"] = True
        if ext.params:
            item["params"] = ext.params
        out.append(item)
    return out


def encode_card(info: CardInfo) -> dict[str, Any]:
    """The 1.0 ``AgentCard``; with ``legacy_v03`` also the fields 0.3 clients read; with a
    ``sign``, signed (``card_signature``)."""
    card: dict[str, Any] = {
        "name": info.name,
        "description": info.description,
        "supportedInterfaces": _interfaces(info),
        "version": info.version,
        "capabilities": {
            "streaming": info.streaming,
            "pushNotifications": info.push_notifications,
            "extensions": _extensions(info),
            "extendedAgentCard": True,
        },
        "securitySchemes": {BEARER: {"httpAuthSecurityScheme": {
            "scheme": "Bearer", "description": "Authorization: Bearer <token>; "
                                               "ask the operator for a token"}}},
        "securityRequirements": [{"schemes": {BEARER: {"list": []}}}],
        "defaultInputModes": list(info.input_modes),
        "defaultOutputModes": list(info.output_modes),
        "skills": _skills(info),
    }
    if info.legacy_v03:
        card.update({
            "protocolVersion": "0.3.0",
            "url": info.jsonrpc_url,
            "preferredTransport": "JSONRPC",
            "additionalInterfaces": [{"url": info.jsonrpc_url, "transport": "JSONRPC"}],
            "security": [{BEARER: []}],
            "supportsAuthenticatedExtendedCard": True,
        })
        # The 0.3 scheme repeats the 1.0 one's fields beside its type: a 1.0 reader that
        # rebuilds the 1.0 scheme from them (the a2a-sdk does) gets the very scheme the
        # signature covers.
        scheme = card["securitySchemes"][BEARER]
        scheme.update({"type": "http", **scheme["httpAuthSecurityScheme"]})
    return card if info.sign is None else info.sign(card)


def encode_card_v1(info: CardInfo) -> dict[str, Any]:
    """The 1.0 card without the 0.3 fields: what a 1.0 method (``GetExtendedAgentCard``)
    and a 1.0 client's card request get (CARD-EXT-001)."""
    return encode_card(replace(info, legacy_v03=False))


def encode_card_v03(info: CardInfo) -> dict[str, Any]:
    """The card in 0.3 shape, for ``agent/getAuthenticatedExtendedCard``."""
    return {
        "protocolVersion": "0.3.0",
        "name": info.name,
        "description": info.description,
        "url": info.jsonrpc_url,
        "preferredTransport": "JSONRPC",
        "additionalInterfaces": [{"url": info.jsonrpc_url, "transport": "JSONRPC"}],
        "version": info.version,
        "capabilities": {"streaming": info.streaming,
                         "pushNotifications": info.push_notifications,
                         "extensions": _extensions(info)},
        "securitySchemes": {BEARER: {"type": "http", "scheme": "bearer"}},
        "security": [{BEARER: []}],
        "defaultInputModes": list(info.input_modes),
        "defaultOutputModes": list(info.output_modes),
        "skills": _skills(info),
        "supportsAuthenticatedExtendedCard": True,
    }
