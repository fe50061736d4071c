"""An A2A agent card (1.0 or 0.3, from any agent) as lines a person reads.

Read leniently: a field of the wrong type is skipped, never an error, since the point is
to look at agents that are not Butlers. Every string from the card passes through
``one_line``: a card is someone else's text, and a control character in it could move the
cursor or retitle the terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from butler.cli.render import one_line
from internal.protocol.a2a.client import Interface, choose_interface, offered_interfaces
from internal.protocol.a2a.codec.card_signature import verify_card
from internal.protocol.a2a.model import ButlerError, version_matches
from internal.signing import BadSignature

# The 1.0 security scheme wrappers (proto3 JSON oneof), and what each is called.
_SCHEMES_V1 = {"httpAuthSecurityScheme": "http", "apiKeySecurityScheme": "apiKey",
               "oauth2SecurityScheme": "oauth2", "openIdConnectSecurityScheme": "openIdConnect",
               "mtlsSecurityScheme": "mutualTLS"}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _words(values: Any) -> str:
    return ", ".join(one_line(v, 80) for v in _list(values)) or "-"


def _yes(value: Any) -> str:
    return "yes" if value is True else "no"


def describe_card(card: Mapping[str, Any]) -> list[str]:
    lines = [f"{one_line(card.get('name', '(no name)'))}  "
             f"version {one_line(card.get('version', '-'))}"]
    if card.get("description"):
        lines.append(f"  {one_line(card['description'], 400)}")
    provider = _dict(card.get("provider"))
    if provider:
        lines.append(f"  provider: {one_line(provider.get('organization', '-'))} "
                     f"{one_line(provider.get('url', ''))}".rstrip())
    lines += _interfaces(card)
    caps = _dict(card.get("capabilities"))
    extended = caps.get("extendedAgentCard", card.get("supportsAuthenticatedExtendedCard"))
    lines.append(f"  streaming: {_yes(caps.get('streaming'))}, push notifications: "
                 f"{_yes(caps.get('pushNotifications'))}, extended card: {_yes(extended)}")
    lines.append(f"  modes: in {_words(card.get('defaultInputModes'))}; "
                 f"out {_words(card.get('defaultOutputModes'))}")
    lines += _skills(card)
    lines += _extensions(caps)
    lines += _security(card)
    lines.append(_signature(card))
    return lines


def _interfaces(card: Mapping[str, Any]) -> list[str]:
    offered = offered_interfaces(card)
    try:
        chosen: Interface | None = choose_interface(card, "it")
    except ButlerError:
        chosen = None
    lines = ["  interfaces:" if offered else "  interfaces: none named"]
    for iface in offered:
        picked = chosen is not None and iface.url.rstrip("/") == chosen.url and \
            iface.binding == chosen.binding and version_matches(iface.version, chosen.version)
        mark = "  <- Butler delegates here" if picked else ""
        lines.append(f"    {one_line(iface.binding) or '?'} {one_line(iface.version) or '?'}  "
                     f"{one_line(iface.url)}{mark}")
    if chosen is None:
        lines.append("    Butler cannot delegate to it: no A2A 1.0 JSON-RPC, HTTP+JSON or gRPC "
                     "interface (gRPC needs the grpc extra), nor JSON-RPC 0.3")
    return lines


def _skills(card: Mapping[str, Any]) -> list[str]:
    skills = [s for s in _list(card.get("skills")) if isinstance(s, dict)]
    lines = [f"  skills ({len(skills)}):"]
    for skill in skills:
        name = f" ({one_line(skill['name'])})" if skill.get("name") else ""
        lines.append(f"    {one_line(skill.get('id', '?'))}{name}: "
                     f"{one_line(skill.get('description', ''))}")
        detail = f"      tags: {_words(skill.get('tags'))}"
        if "inputModes" in skill or "outputModes" in skill:
            detail += (f"; modes: in {_modes(skill, 'inputModes')}, "
                       f"out {_modes(skill, 'outputModes')}")
        lines.append(detail)
    return lines


def _modes(skill: Mapping[str, Any], key: str) -> str:
    """A skill without its own modes has the card's defaults."""
    return _words(skill[key]) if key in skill else "the default"


def _extensions(caps: Mapping[str, Any]) -> list[str]:
    extensions = [e for e in _list(caps.get("extensions")) if isinstance(e, dict)]
    lines = [f"  extensions ({len(extensions)}):"]
    for ext in extensions:
        required = " (required)" if ext.get("required") is True else ""
        lines.append(f"    {one_line(ext.get('uri', '?'))}{required}: "
                     f"{one_line(ext.get('description', ''))}")
    return lines


def _scheme(raw: Mapping[str, Any]) -> str:
    """``http bearer``, ``apiKey in header X-Key``, ``oauth2``... from a 1.0 or 0.3 scheme."""
    for wrapper, kind in _SCHEMES_V1.items():
        if isinstance(raw.get(wrapper), dict):
            raw = {"type": kind, **raw[wrapper]}
            break
    kind = one_line(raw.get("type", "?"))
    if kind == "http":
        return f"http {one_line(raw.get('scheme', '?')).lower()}"
    if kind == "apiKey":
        return f"apiKey in {one_line(raw.get('in', raw.get('location', '?')))} " \
               f"{one_line(raw.get('name', '?'))}"
    return kind


def _security(card: Mapping[str, Any]) -> list[str]:
    schemes = _dict(card.get("securitySchemes"))
    if not schemes:
        return ["  security: none declared"]
    lines = ["  security:"]
    lines += [f"    {one_line(name)}: {_scheme(_dict(raw))}" for name, raw in schemes.items()]
    # 1.0 lists requirements as {"schemes": {name: ...}}, 0.3 as {name: [scopes]}.
    needed = [_dict(req).get("schemes", req) for req in
              _list(card.get("securityRequirements")) or _list(card.get("security"))]
    names = sorted({one_line(n) for req in needed for n in _dict(req)})
    lines.append(f"    required: {', '.join(names) or 'none'}")
    return lines


def _signature(card: Mapping[str, Any]) -> str:
    """Whether the card's JWS checks with the key it names (docs/receipts.md). A valid
    signature proves the card is whole and which key signed it; whether that key is the
    one expected is a pin's job (``peer_identity_changed`` when delegating)."""
    signatures = _list(card.get("signatures"))
    if not signatures:
        return "  signature: none (the card is unsigned)"
    try:
        key = verify_card(card)
    except BadSignature as exc:
        return f"  signature: INVALID ({one_line(exc)})"
    return f"  signature: valid, Ed25519 key {key.kid}"
