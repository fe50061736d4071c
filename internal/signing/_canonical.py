"""RFC 8785 JSON Canonicalization Scheme: Butler's one encoder for JSON that is hashed or
signed (a card signature, a receipt, a key thumbprint or rotation, an audit record's hash).

``json.dumps`` cannot produce them: it escapes non-ASCII, sorts keys by code point rather
than by UTF-16 code unit, and writes numbers with ``repr`` rather than with ECMAScript's
``Number::toString``. A ``Decimal`` (``exact_json`` reads fractions as Decimals) is
written as the IEEE double it rounds to, as RFC 8785 section 3.2.2.3 requires.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

from internal.protocol.a2a.model import RequestError

MAX_DEPTH = 128
_SAFE_INTEGER = 2**53
_ESCAPE = re.compile(r'[\x00-\x1f\\"]')
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
            "\t": "\\t"}
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_ASTRAL = re.compile(r"[\U00010000-\U0010ffff]")  # where code point and UTF-16 orders part


class Encoded(str):
    """JSON text already in canonical form, written into the output as it is: a stored
    text that was hashed as written (an audit record's detail) hashes the same again."""

    __slots__ = ()


class NotCanonical(RequestError, ValueError):
    """The value has no canonical form: a NaN, an infinity, a lone surrogate, a key that
    is not a string, an integer no double holds exactly, or nesting past ``MAX_DEPTH``."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid_params", message)


def canonical(value: Any) -> bytes:
    """The canonical UTF-8 bytes of ``value``, a JSON value of Python types."""
    if _plain(value):
        # No number but small integers, no key past the BMP: here ``json.dumps`` writes
        # exactly RFC 8785's bytes (the same escapes, code point order is UTF-16 order),
        # in C rather than in ``_write``'s Python steps, which every receipt would pay.
        try:
            return _DUMPS(value).encode()
        except UnicodeEncodeError:
            raise NotCanonical("a string holds a lone surrogate") from None
    out: list[str] = []
    _write(value, out, 0)
    return "".join(out).encode()


_DUMPS = json.JSONEncoder(ensure_ascii=False, check_circular=False, allow_nan=False,
                          sort_keys=True, separators=(",", ":")).encode


def _plain(value: Any) -> bool:
    """Whether ``json.dumps`` would write ``value`` canonically (see ``canonical``)."""
    if type(value) not in (dict, list, tuple):
        return _plain_scalar(value)
    # Containers only go on the stack: a receipt's claims (a dozen strings) are judged in
    # one pass over one dict, their keys with one search for a character past the BMP.
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        node, depth = pending.pop()
        if depth >= MAX_DEPTH:
            return False
        if type(node) is dict:
            for key in node:
                if type(key) is not str:
                    return False
            if _ASTRAL.search("".join(node)):
                return False
            node = node.values()
        for item in node:
            kind = type(item)
            if kind is str or item is None or kind is bool:
                continue
            if kind is dict or kind is list or kind is tuple:
                pending.append((item, depth + 1))
            elif kind is not int or abs(item) >= _SAFE_INTEGER:
                return False  # floats, Decimals and anything else take the careful path
    return True


def _plain_scalar(value: Any) -> bool:
    kind = type(value)
    if kind is int:
        return bool(abs(value) < _SAFE_INTEGER)
    return kind is str or value is None or kind is bool


def number(value: float) -> str:
    """ECMAScript ``Number::toString`` (ECMA-262 7.1.12.1), which RFC 8785 uses."""
    if not math.isfinite(value):
        raise NotCanonical(f"{value!r} is not a JSON number")
    if value == 0:
        return "0"
    if value < 0:
        return "-" + number(-value)
    # repr gives the shortest digits that round-trip, as ECMAScript's; n is where the
    # decimal point goes relative to them (value = 0.DIGITS x 10^n).
    parts = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(parts.exponent, int)
    digits = "".join(map(str, parts.digits))
    k, n = len(digits), len(digits) + parts.exponent
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    e = n - 1
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{head}e{'+' if e > 0 else '-'}{abs(e)}"


def _string(text: str, out: list[str]) -> None:
    if _SURROGATE.search(text):
        raise NotCanonical("a string holds a lone surrogate")
    out.append('"' + _ESCAPE.sub(
        lambda m: _ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), text) + '"')


def _utf16(key: str) -> list[int]:
    raw = key.encode("utf-16-be")
    return [int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2)]


def _write(value: Any, out: list[str], depth: int) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif type(value) is Encoded:
        out.append(value)
    elif isinstance(value, str):
        _string(value, out)
    elif isinstance(value, int):
        if abs(value) >= _SAFE_INTEGER:
            raise NotCanonical(f"integer {value} is past what a double holds exactly")
        out.append(str(value))
    elif isinstance(value, float | Decimal):
        out.append(number(float(value)))
    elif isinstance(value, dict | list | tuple):
        if depth >= MAX_DEPTH:
            raise NotCanonical(f"nesting exceeds {MAX_DEPTH}")
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise NotCanonical("an object key is not a string")
            out.append("{")
            astral = any(_ASTRAL.search(k) for k in value)
            for i, key in enumerate(sorted(value, key=_utf16) if astral else sorted(value)):
                if i:
                    out.append(",")
                _string(key, out)
                out.append(":")
                _write(value[key], out, depth + 1)
            out.append("}")
        else:
            out.append("[")
            for i, item in enumerate(value):
                if i:
                    out.append(",")
                _write(item, out, depth + 1)
            out.append("]")
    else:
        raise NotCanonical(f"{type(value).__name__} is not a JSON value")
