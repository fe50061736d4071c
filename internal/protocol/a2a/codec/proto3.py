"""Reading proto3-JSON shaped values strictly: each problem is ``invalid_params`` naming
the field. Shared by the A2A 1.0 and 0.3 codecs.

proto3 JSON accepts a field under its lowerCamelCase name or its original snake_case
name, integers as numbers or decimal strings, and enums by name or number.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from decimal import Decimal
from functools import lru_cache
from typing import Any

from internal.protocol.a2a.model import RequestError

_SNAKE = re.compile(r"(?<!^)([A-Z])")
INT32_MAX = 2**31 - 1


def bad(message: str) -> RequestError:
    return RequestError("invalid_params", message)


def obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(f"{where} must be a JSON object")
    return value


def get(data: Mapping[str, Any], name: str) -> Any:
    """``data[name]``, or under its snake_case spelling; None when absent."""
    if name in data:
        return data[name]
    snake = _snake_case(name)
    return None if snake == name else data.get(snake)


@lru_cache(maxsize=512)
def _snake_case(name: str) -> str:
    # Field names are the codecs' own constants: a few dozen, each converted once.
    return _SNAKE.sub(r"_\1", name).lower()


def string(data: Mapping[str, Any], name: str, where: str, *, required: bool = False,
           max_len: int = 1024) -> str:
    value = get(data, name)
    if value is None or value == "":
        if required:
            raise bad(f"{where}.{name} is required")
        return ""
    if not isinstance(value, str) or len(value) > max_len:
        raise bad(f"{where}.{name} must be a string of at most {max_len} characters")
    return value


def integer(data: Mapping[str, Any], name: str, where: str, *, minimum: int = 0,
            maximum: int = INT32_MAX) -> int | None:
    value = get(data, name)
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,12}", value.strip()):
        value = int(value.strip())
    if isinstance(value, Decimal) and value == value.to_integral_value():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise bad(f"{where}.{name} must be an integer in {minimum}..{maximum}")
    return value


def boolean(data: Mapping[str, Any], name: str, where: str) -> bool | None:
    value = get(data, name)
    if value is None:
        return None
    if isinstance(value, str) and value in ("true", "false"):
        return value == "true"
    if not isinstance(value, bool):
        raise bad(f"{where}.{name} must be true or false")
    return value


def strings(data: Mapping[str, Any], name: str, where: str, *, limit: int = 64,
            max_len: int = 1024) -> tuple[str, ...]:
    value = get(data, name)
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > limit or not all(
            isinstance(v, str) and len(v) <= max_len for v in value):
        raise bad(f"{where}.{name} must be a list of at most {limit} strings")
    return tuple(value)


def metadata(data: Mapping[str, Any], where: str, name: str = "metadata") -> dict[str, Any] | None:
    value = get(data, name)
    if value is None:
        return None
    return obj(value, f"{where}.{name}")


def enum(value: Any, names: Mapping[str, Any], numbers: Mapping[int, Any], where: str) -> Any:
    if isinstance(value, str) and value in names:
        return names[value]
    if isinstance(value, int) and not isinstance(value, bool) and value in numbers:
        return numbers[value]
    raise bad(f"{where} must be one of {', '.join(names)}")


def base64_text(value: Any, where: str) -> str:
    """Validated base64 (standard or URL-safe alphabet), returned as sent."""
    if not isinstance(value, str):
        raise bad(f"{where} must be a base64 string")
    try:
        base64.b64decode(value.replace("-", "+").replace("_", "/") + "=" * (-len(value) % 4),
                         validate=True)
    except (binascii.Error, ValueError):
        raise bad(f"{where} must be base64") from None
    return value
