from __future__ import annotations

from datetime import UTC, datetime, timedelta


def now_iso() -> str:
    """UTC now as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    return _iso(datetime.now(UTC))


def now_utc_iso() -> str:
    """UTC now as ``datetime.isoformat(timespec="microseconds")`` writes it (``+00:00``,
    the time audit records keep)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def iso_before(seconds: float) -> str:
    return _iso(datetime.now(UTC) - timedelta(seconds=seconds))


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
