from __future__ import annotations

from datetime import UTC, datetime, timedelta


def now_iso() -> str:
    """UTC now as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_utc_iso() -> str:
    """UTC now as ``datetime.isoformat(timespec="microseconds")`` writes it (``+00:00``,
    the time audit records keep)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def iso_before(seconds: float) -> str:
    moment = datetime.now(UTC) - timedelta(seconds=seconds)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
