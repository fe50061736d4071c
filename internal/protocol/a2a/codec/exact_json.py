"""JSON on the wire: exact decimals in, exact decimals out, bounded nesting.

orjson does the work where it gives the same answer as the standard library, which is
nearly always: it works in C, and every task is encoded more than once (answer, stored
row). The standard library stays the reference:
whatever orjson refuses (integers past 64 bits, lone surrogates) or cannot read exactly
(fractions, which must become ``Decimal``) goes to ``json``.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import orjson

from internal.protocol.a2a.model import RequestError

_SURROGATE = re.compile("[\ud800-\udfff]")


def json_default(value: Any) -> Any:
    """What JSON writes for a value of ours it has no form for: a Decimal as its text, a
    tuple or set as a list."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, tuple | frozenset | set):
        return list(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def dumps(data: Any) -> str:
    try:
        return _orjson_dumps(data).decode("utf-8")
    except orjson.JSONEncodeError:
        return _std_dumps(data)


def dumps_bytes(data: Any) -> bytes:
    try:
        return _orjson_dumps(data)
    except orjson.JSONEncodeError:
        return _std_dumps(data).encode("utf-8")


def _orjson_dumps(data: Any) -> bytes:
    try:
        # Keys are nearly always strings, and orjson skips its check for other keys unless
        # asked: it refuses a document with another key, which then goes again, asking.
        return orjson.dumps(data, default=json_default)
    except orjson.JSONEncodeError:
        return orjson.dumps(data, default=json_default, option=orjson.OPT_NON_STR_KEYS)


def _std_dumps(data: Any) -> str:
    return json.dumps(data, default=json_default, ensure_ascii=False, separators=(",", ":"))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(raw: bytes | str, *, max_depth: int = 32) -> Any:
    """Parse JSON with numbers as ``Decimal`` (never binary floats); bad input -> 400."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise RequestError("malformed_json", "request body is not UTF-8") from None
    # No deeper nesting than brackets in all: most bodies skip the character scan.
    if text.count("{") + text.count("[") > max_depth and nesting(text) > max_depth:
        raise RequestError("invalid_request", f"JSON nested deeper than {max_depth} levels")
    try:
        fast = orjson.loads(text)
    except orjson.JSONDecodeError:
        pass  # the standard library decides, and words the error
    else:
        # orjson reads fractions, and integers past 64 bits, as binary floats: a document
        # with any float is read again, with its fractions as exact Decimals.
        if not _has_float(fast):
            return fast
    try:
        value = json.loads(text, parse_float=Decimal, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise RequestError("malformed_json", f"malformed JSON: {exc}") from None
    # What orjson refused but the standard library read: integers past 64 bits, or a
    # lone surrogate escape ("\ud800"), which is no Unicode text: nothing could store,
    # log or send it on, so it is refused here, before anything sees it.
    if _has_surrogate(value):
        raise RequestError("invalid_params", "a string holds a lone UTF-16 surrogate "
                           "(\\ud800-\\udfff escape), which is not valid Unicode text")
    return value


def _has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    return False


def _has_float(value: Any) -> bool:
    # A loop over containers, not a call per value: this runs on every body read.
    kind = type(value)
    if kind is float:
        return True
    if kind is not dict and kind is not list:
        return False
    pending = [value]
    while pending:
        node = pending.pop()
        for item in node.values() if type(node) is dict else node:
            kind = type(item)
            if kind is float:
                return True
            if kind is dict or kind is list:
                pending.append(item)
    return False


def nesting(text: str) -> int:
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
