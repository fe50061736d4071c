"""Card validation: a card is checked once, on the way in, and everything the registry
indexes (capabilities, skill ids, tags, free text) is derived from it here, so both
stores index the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from butler.registry.model import (
    AgentEntry,
    bad,
    check_url,
    fold,
    has_control,
    normalise_tag,
    normalise_term,
)
from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.codec.butler_v2 import parse_amount
from internal.protocol.a2a.model import RequestError

MAX_LIST = 64

# Butler's own /v2/card, then the optional fields of a standard A2A AgentCard.
_BUTLER_FIELDS = frozenset({
    "name", "description", "url", "version", "capabilities", "skills", "auth_schemes",
    "streaming", "updated_at", "agent_id", "swarm", "identity_key", "key_rotations",
})
_A2A_FIELDS = frozenset({
    "protocolVersion", "preferredTransport", "additionalInterfaces", "iconUrl", "provider",
    "documentationUrl", "securitySchemes", "security", "defaultInputModes",
    "defaultOutputModes", "supportsAuthenticatedExtendedCard", "signatures",
    "supportedInterfaces", "securityRequirements",
})
_SKILL_FIELDS = frozenset({
    "id", "name", "description", "capabilities", "tags", "examples", "cost_usd",
    "inputModes", "outputModes", "security", "input_schema", "bridge_fidelity",
})
_FIDELITY_LEVELS = ("lossless", "adapted", "unsupported")


def _text(value: Any, path: str, max_len: int, *, multiline: bool = False) -> str:
    if not isinstance(value, str):
        raise bad(path, f"expected a string, got {_kind(value)}")
    if len(value) > max_len:
        raise bad(path, f"longer than {max_len} characters")
    if has_control(value, multiline=multiline):
        raise bad(path, "must not contain control characters")
    return value


def _list(value: Any, path: str, max_items: int = MAX_LIST) -> list[Any]:
    if not isinstance(value, list):
        raise bad(path, f"expected a list, got {_kind(value)}")
    if len(value) > max_items:
        raise bad(path, f"more than {max_items} items")
    return value


def _kind(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
             int: "an integer", Decimal: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _plain(value: Any, path: str) -> Any:
    """JSON values as stored: integral numbers as int, others as exact decimal strings,
    and no control characters in any string (tab and newline aside)."""
    if isinstance(value, dict):
        return {_text(k, path, 256): _plain(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):
        return _text(value, path, 1 << 20, multiline=True)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise bad(path, "numbers must be finite")
        # Checked by exponent, without arithmetic: int(Decimal("1e999999999")) would build
        # a gigantic integer, and abs() of it overflows the decimal context.
        if value.adjusted() < 15 and value == value.to_integral_value():
            return int(value)
        return str(value)
    if value is None or isinstance(value, bool | int):
        return value
    raise bad(path, f"unsupported value {_kind(value)}")


@dataclass(frozen=True, slots=True)
class CardIndex:
    """What the registry derives from a validated card."""

    card: dict[str, Any]
    display_name: str
    description: str
    url: str
    capabilities: tuple[str, ...]
    skills: tuple[str, ...]
    tags: tuple[str, ...]
    search_text: str


def validate_card(raw: Any, *, max_bytes: int) -> CardIndex:
    if not isinstance(raw, dict):
        raise bad("card", f"expected a mapping, got {_kind(raw)}")
    unknown = sorted(set(raw) - _BUTLER_FIELDS - _A2A_FIELDS)
    if unknown:
        raise bad(f"card.{unknown[0][:64]}", "unknown field")
    card = _plain(raw, "card")
    size = len(exact_json.dumps_bytes(card))
    if size > max_bytes:
        raise RequestError("payload_too_large", f"card is {size} bytes; the limit is {max_bytes}")
    if "name" not in card:
        raise bad("card.name", "required")
    display = _text(card["name"], "card.name", 200)
    if not display.strip():
        raise bad("card.name", "must not be empty")
    description = _text(card.get("description", ""), "card.description", 8192, multiline=True)
    url = check_url(card["url"], "card.url") if "url" in card else ""
    for key in ("version", "agent_id", "updated_at", "protocolVersion", "preferredTransport"):
        if key in card:
            _text(card[key], f"card.{key}", 256)
    for key in ("streaming", "supportsAuthenticatedExtendedCard"):
        if key in card and not isinstance(card[key], bool):
            raise bad(f"card.{key}", f"expected true or false, got {_kind(card[key])}")
    if "auth_schemes" in card:
        for i, item in enumerate(_list(card["auth_schemes"], "card.auth_schemes")):
            _text(item, f"card.auth_schemes[{i}]", 64)
    capabilities: list[str] = []
    # A standard A2A card's "capabilities" is a mapping of protocol features, not a list.
    caps = card.get("capabilities", [])
    if not isinstance(caps, dict):
        capabilities = [normalise_term(c, f"card.capabilities[{i}]")
                        for i, c in enumerate(_list(caps, "card.capabilities"))]
    skill_ids: list[str] = []
    tags: list[str] = []
    words = [display, description]
    for i, skill in enumerate(_list(card.get("skills", []), "card.skills")):
        s_caps, s_tags, s_words = _skill(skill, f"card.skills[{i}]")
        skill_ids.append(normalise_term(skill["id"], f"card.skills[{i}].id"))
        capabilities += s_caps
        tags += s_tags
        words += s_words
    if len(set(skill_ids)) != len(skill_ids):
        raise bad("card.skills", "skill ids must be unique")
    return CardIndex(
        card=card, display_name=display, description=description, url=url,
        capabilities=tuple(sorted(set(capabilities))), skills=tuple(sorted(set(skill_ids))),
        tags=tuple(sorted(set(tags))), search_text=fold("\n".join(words)),
    )


def _skill(skill: Any, path: str) -> tuple[list[str], list[str], list[str]]:
    if not isinstance(skill, dict):
        raise bad(path, f"expected a mapping, got {_kind(skill)}")
    unknown = sorted(set(skill) - _SKILL_FIELDS)
    if unknown:
        raise bad(f"{path}.{unknown[0][:64]}", "unknown field")
    if "id" not in skill:
        raise bad(f"{path}.id", "required")
    name = _text(skill.get("name", ""), f"{path}.name", 200)
    description = _text(skill.get("description", ""), f"{path}.description", 8192,
                        multiline=True)
    caps = [normalise_term(c, f"{path}.capabilities[{i}]")
            for i, c in enumerate(_list(skill.get("capabilities", []), f"{path}.capabilities"))]
    tags = [normalise_tag(t, f"{path}.tags[{i}]")
            for i, t in enumerate(_list(skill.get("tags", []), f"{path}.tags", 32))]
    for i, example in enumerate(_list(skill.get("examples", []), f"{path}.examples", 32)):
        _text(example, f"{path}.examples[{i}]", 2000, multiline=True)
    if "cost_usd" in skill:
        cost = skill["cost_usd"]
        if isinstance(cost, bool) or not isinstance(cost, str | int):
            raise bad(f"{path}.cost_usd", "expected a decimal amount")
        amount = parse_amount(cost)
        if amount is None or amount < 0:
            raise bad(f"{path}.cost_usd", "expected a finite amount >= 0")
    if "input_schema" in skill and (not isinstance(skill["input_schema"], dict)
                                    or skill["input_schema"].get("type") != "object"):
        raise bad(f"{path}.input_schema", "expected a JSON Schema with type object")
    if "bridge_fidelity" in skill:
        _fidelity(skill["bridge_fidelity"], f"{path}.bridge_fidelity")
    return caps, tags, [name, description]


def _fidelity(value: Any, path: str) -> None:
    if not isinstance(value, dict) or value.get("level") not in _FIDELITY_LEVELS:
        raise bad(f"{path}.level", f"expected one of {', '.join(_FIDELITY_LEVELS)}")
    for i, caveat in enumerate(_list(value.get("caveats", []), f"{path}.caveats", 32)):
        _text(caveat, f"{path}.caveats[{i}]", 500)


def build_entry(name: str, owner: str, index: CardIndex, *, url: str, now: float,
                ttl_seconds: int) -> AgentEntry:
    return AgentEntry(
        name=name, display_name=index.display_name, owner=owner, url=url, card=index.card,
        description=index.description, capabilities=index.capabilities, skills=index.skills,
        tags=index.tags, search_text=fold(f"{name}\n{index.search_text}"), registered_at=now,
        expires_at=now + ttl_seconds, ttl_seconds=ttl_seconds,
    )
