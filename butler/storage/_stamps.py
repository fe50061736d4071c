"""Times as the task store orders them: microseconds since the epoch, for a stamp in the
one canonical form Butler writes, ``2026-11-24T01:52:18.123456Z`` (``now_iso``)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

_EPOCH = datetime(1970, 1, 1)  # naive UTC: the canonical form has no offset to parse
_MICROSECOND = timedelta(microseconds=1)
_CANONICAL = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", re.ASCII)


def stamp_micros(stamp: str) -> int | None:
    """Microseconds since the epoch of a canonical stamp; None for any other text."""
    if _CANONICAL.fullmatch(stamp) is None:
        return None
    try:
        moment = datetime.fromisoformat(stamp[:26])
    except ValueError:  # no such day or time
        return None
    return (moment - _EPOCH) // _MICROSECOND


def micros_stamp(micros: int) -> str:
    """The canonical stamp of microseconds since the epoch."""
    return (_EPOCH + micros * _MICROSECOND).isoformat(timespec="microseconds") + "Z"
