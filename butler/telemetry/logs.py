"""Logging set-up: key=value or JSON lines, chosen in config, with the trace id of the
task a line is about. Tokens never reach a logger: nothing here is handed one."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from decimal import Decimal
from typing import Any

from butler.config.model import LoggingConfig

TRACE_ID: contextvars.ContextVar[str] = contextvars.ContextVar("butler_trace_id", default="")


class TraceIdFilter(logging.Filter):
    """Stamps every record with the trace id of the task being handled, if any."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "trace_id", ""):
            record.trace_id = TRACE_ID.get()
        return True


def _fields(record: logging.LogRecord, formatter: logging.Formatter) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ts": formatter.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    # Named facts of the line (``extra={"kv": {...}}``): fields of their own, not prose, so
    # the JSON format keeps them queryable (a number stays a number, a bool a bool) and
    # key=value stays greppable.
    kv = getattr(record, "kv", None)
    if isinstance(kv, dict):
        for key, value in kv.items():
            out.setdefault(str(key), _typed(value))
    trace_id = getattr(record, "trace_id", "")
    if trace_id:
        out["trace_id"] = trace_id
    if record.exc_info:
        out["exc"] = formatter.formatException(record.exc_info)
    return out


def _typed(value: Any) -> Any:
    """Numbers (an amount of money included), bools and None as they are, to be written as
    JSON numbers, bools and null; anything else as its text."""
    return value if value is None or isinstance(value, bool | int | float | Decimal) \
        else str(value)


def _number(value: Any) -> float:
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"cannot write {type(value).__name__}")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record, self), ensure_ascii=False, default=_number)


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = []
        for key, typed in _fields(record, self).items():
            value = typed if isinstance(typed, str) else _text(typed)
            if value == "" or any(c in value for c in ' "=\n\\'):
                value = json.dumps(value, ensure_ascii=False)
            parts.append(f"{key}={value}")
        return " ".join(parts)


def setup_logging(config: LoggingConfig) -> None:
    handler = logging.StreamHandler(sys.stderr)
    formatter = JsonFormatter() if config.format == "json" else KeyValueFormatter()
    formatter.converter = _utc  # timestamps in UTC, marked Z
    handler.setFormatter(formatter)
    handler.addFilter(TraceIdFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.level.upper())
    # aiohttp's access log would print request lines; errors come through our middleware.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def _utc(seconds: float | None) -> time.struct_time:
    return time.gmtime(seconds)
