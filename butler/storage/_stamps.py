"""Times as the task store orders them: microseconds since the epoch, for a stamp in the
one canonical form Butler writes, ``2026-11-24T01:52:18.123456Z`` (``now_iso``)."""

from __future__ import annotations

from datetime import datetime, timedelta

_EPOCH = datetime(1970, 1, 1)  # naive UTC: the canonical form has no offset to parse
_MICROSECOND = timedelta(microseconds=1)


def stamp_micros(stamp: str) -> int | None:
    """Microseconds since the epoch of a canonical stamp; None for any other text."""
    if len(stamp) != 27 or stamp[26] != "Z" or stamp[19] != ".":
        return None
    try:
        moment = datetime.fromisoformat(stamp[:26])
    except ValueError:
        return None
    if micros_stamp(micros := (moment - _EPOCH) // _MICROSECOND) != stamp:
        return None  # the one form only
    return micros


def micros_stamp(micros: int) -> str:
    """The canonical stamp of microseconds since the epoch."""
    return (_EPOCH + micros * _MICROSECOND).isoformat(timespec="microseconds") + "Z"
