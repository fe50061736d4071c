"""Values as SQLite stores them compactly. Times: microseconds since the epoch (an 8-byte integer
at most) for a stamp in the one canonical form Butler writes, ``2026-11-24T01:52:18.123456Z``
(``now_iso``); any other text is not converted, so it is kept exactly as it was."""

from __future__ import annotations

from datetime import datetime, timedelta

_EPOCH = datetime(1970, 1, 1)  # naive UTC: the canonical form has no offset to parse
_SECOND = timedelta(seconds=1)


_last_parsed: tuple[str, int] = ("", 0)


def stamp_micros(stamp: str) -> int | None:
    """Microseconds since the epoch of a canonical stamp; None for any other text. A
    task's times mostly share one second: its date and time are parsed once."""
    global _last_parsed
    if len(stamp) != 27 or stamp[26] != "Z" or stamp[19] != ".":
        return None
    fraction = stamp[20:26]
    if not (fraction.isascii() and fraction.isdigit()):
        return None
    prefix = stamp[:19]
    cached, second = _last_parsed
    if cached != prefix:
        try:
            moment = datetime.fromisoformat(prefix)
        except ValueError:
            return None
        second = (moment - _EPOCH) // _SECOND
        if (_EPOCH + second * _SECOND).isoformat() != prefix:  # the one form only
            return None
        _last_parsed = (prefix, second)
    return second * 1_000_000 + int(fraction)


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
