"""JSON on the wire: exact decimals in, exact decimals out, bounded nesting."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from internal.protocol.a2a.errors import RequestError


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, tuple | frozenset | set):
        return list(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def dumps(data: Any) -> str:
    return json.dumps(data, default=_default, ensure_ascii=False, separators=(",", ":"))


def dumps_bytes(data: Any) -> bytes:
    return dumps(data).encode("utf-8")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(raw: bytes | str, *, max_depth: int = 32) -> Any:
    """Parse JSON with numbers as ``Decimal`` (never binary floats); bad input -> 400."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise RequestError("malformed_json", "request body is not UTF-8") from None
    # No deeper nesting than brackets in all: most bodies skip the character scan.
    if text.count("{") + text.count("[") > max_depth and _nesting(text) > max_depth:
        raise RequestError("invalid_request", f"JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(text, parse_float=Decimal, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise RequestError("malformed_json", f"malformed JSON: {exc}") from None


def _nesting(text: str) -> int:
    """Deepest bracket nesting outside strings, checked before parsing so a hostile body
    cannot make the parser recurse."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif ch in "]}":
            depth -= 1
    return deepest


def plain_numbers(value: Any) -> Any:
    """User data back to ordinary JSON numbers: ``loads`` reads every fraction as a
    Decimal so that money stays exact, but a skill's input is not money and must come
    out as the number it went in as, not as a string."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: plain_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_numbers(v) for v in value]
    return value
