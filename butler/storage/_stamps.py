"""Values as SQLite stores them compactly. Times: microseconds since the epoch (an 8-byte integer
at most) for a stamp in the one canonical form Butler writes, ``2026-11-24T01:52:18.123456Z``
(``now_iso``); any other text is not converted, so it is kept exactly as it was."""

from __future__ import annotations

from datetime import datetime, timedelta

_EPOCH = datetime(1970, 1, 1)  # naive UTC: the canonical form has no offset to parse
_MICRO = timedelta(microseconds=1)


def stamp_micros(stamp: str) -> int | None:
    """Microseconds since the epoch of a canonical stamp; None for any other text."""
    if len(stamp) != 27 or stamp[-1] != "Z" or stamp[10] != "T" or stamp[19] != ".":
        return None
    try:
        moment = datetime.fromisoformat(stamp[:-1])
    except ValueError:
        return None
    micros = (moment - _EPOCH) // _MICRO
    return micros if micros_stamp(micros) == stamp else None


_last_second: tuple[int, str] = (-1, "")


def micros_stamp(micros: int) -> str:
    """The canonical stamp; a row's times mostly share one second, formatted once."""
    global _last_second
    second, micro = divmod(micros, 1_000_000)
    cached, prefix = _last_second
    if cached != second:
        prefix = (_EPOCH + timedelta(seconds=second)).isoformat()
        _last_second = (second, prefix)
    return f"{prefix}.{micro:06d}Z"


def hex_bytes(text: str | None) -> bytes | str | None:
    """Lowercase hex text (Butler's task, context and trace ids, hashes) as its bytes,
    half the size; any other text as it is. ``hex_text`` gives it back."""
    if not text or len(text) % 2 or not text.isalnum():
        return text
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        return text
    return raw if raw.hex() == text else text


def hex_text(value: object) -> object:
    return value.hex() if type(value) is bytes else value
