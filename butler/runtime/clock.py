from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

_second = -1
_prefix = ""


def now_iso() -> str:
    """UTC now as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``. Called several times per task: the
    date and time of day are formatted once per second, the microseconds each time."""
    return _now("Z")


def now_utc_iso() -> str:
    """UTC now as ``datetime.isoformat(timespec="microseconds")`` writes it (``+00:00``,
    the time audit records keep), from the same once-per-second prefix as ``now_iso``
    rather than a ``datetime`` formatted each time."""
    return _now("+00:00")


def _now(zone: str) -> str:
    global _second, _prefix
    now = time.time()
    second = int(now)
    if second != _second:
        _prefix = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _second = second
    return f"{_prefix}.{int((now - second) * 1_000_000):06d}{zone}"


def iso_before(seconds: float) -> str:
    moment = datetime.now(UTC) - timedelta(seconds=seconds)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
