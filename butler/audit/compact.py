"""How a record's repeated texts, detail and hash are stored compactly (schema 2), and
read back to exactly the text that was hashed (docs/audit.md#storage).

- ``kind``, ``caller`` and ``decision`` repeat on every record, from a small set: each is
  stored as a number into ``audit_names`` (``butler.storage.NumberedNames``).
- ``detail``: ``{}`` is an empty BLOB. A detail whose values are all ASCII text (a task's final
  record: ``receipt``, ``seconds``, ``skill``, ``peer``) is stored as a BLOB: the JSON
  array ``[keys, value, ...]`` (``keys`` numbers its sorted key names in
  ``audit_names``), a receipt id ``r-<32 hex>`` written as ``null`` with its 16 bytes
  after the array and a NUL, a duration ``<s>.<6 digits>`` as its microseconds. It is
  stored so only when that gives the canonical text back; else as the text.
- ``hash``: every ``ANCHOR_EVERY``-th record keeps its whole hash; the others keep its
  first ``CHECK_BYTES`` bytes, enough to name an edited record, and are given their hash
  by chaining from the nearest whole one (``rows.hash_before``). An edit still changes
  every hash after it, so the next whole hash, the segment's sealed one and the head all
  stop matching too.
"""

from __future__ import annotations

import json
import re
import sqlite3
from json.encoder import encode_basestring
from typing import Any, Final

from butler.storage import NumberedNames, names_table

NAMES_TABLE: Final = names_table("audit_names")
ANCHOR_EVERY: Final = 64
CHECK_BYTES: Final = 4
_RECEIPT: Final = re.compile(r"r-([0-9a-f]{32})")
_SECONDS: Final = re.compile(r"(0|[1-9][0-9]{0,11})\.([0-9]{6})")


class Names(NumberedNames):
    """``audit_names`` as one transaction sees it: read anew by each append and each
    read, so a batch rolled back, or another process's append, leaves nothing stale."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__("audit_names", conn.execute("SELECT ref, name FROM audit_names"))
        self._conn = conn
        self.shapes: dict[tuple[str, ...], str] = {}  # a detail's keys: their number

    def ref(self, name: str) -> bytes | None:
        """``name``'s number as stored, added if new (None once the file is full)."""
        added = self.add(self._conn, name)
        if added is not None:
            self.known([added])
        return self.find(name)

    def kept(self, text: object) -> object:
        """A text column as an append stores it: its number, else as it is (a version 0
        row's column may hold anything: it is kept for verify to report)."""
        ref = self.ref(text) if type(text) is str else None
        return text if ref is None else ref


def stored_detail(text: str, detail: dict[str, Any], names: Names) -> str | bytes:
    """``detail`` (whose canonical text is ``text``) as the row keeps it. Exact by
    construction: each value is ASCII text, written as JSON writes it, or one of the two
    forms whose patterns spell it back digit for digit (tests/test_audit_encoding.py
    reads every such row back with a decoder of its own)."""
    if not detail:
        return b""
    keys = tuple(sorted(detail))
    shape = names.shapes.get(keys)
    if shape is None:
        if not all(type(k) is str and k.isascii() for k in keys):
            return text
        ref = names.ref(json.dumps(keys, separators=(",", ":")))
        if ref is None:
            return text
        shape = names.shapes[keys] = str(int.from_bytes(ref, "big"))
    values = [shape]
    tail = bytearray()
    for key in keys:
        value = detail[key]
        if type(value) is not str or not value.isascii():
            return text
        if (receipt := _RECEIPT.fullmatch(value)) is not None:
            values.append("null")
            tail += bytes.fromhex(receipt.group(1))
        elif (seconds := _SECONDS.fullmatch(value)) is not None:
            values.append(str(int(seconds.group(1)) * 1_000_000 + int(seconds.group(2))))
        else:
            values.append(encode_basestring(value))
    return ("[" + ",".join(values) + "]").encode() + b"\x00" + tail


def detail_text(stored: object, names: dict[int, str]) -> str | None:
    """The canonical text a stored detail gives back; None when it is not one the
    writer could have stored (an edited row)."""
    if stored == b"":
        return "{}"
    if type(stored) is not bytes:
        return stored if isinstance(stored, str) else None
    array, nul, tail = stored.partition(b"\x00")
    try:
        values = json.loads(array) if nul else None
        if not isinstance(values, list) or not values or type(values[0]) is not int:
            return None
        keys = json.loads(names[values[0]]) if values[0] in names else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(keys, list) or len(keys) != len(values) - 1 \
            or not all(type(k) is str for k in keys):
        return None
    out, at = [], 0
    for key, value in zip(keys, values[1:], strict=True):
        if value is None:
            if len(tail) < at + 16:
                return None
            value, at = "r-" + tail[at:at + 16].hex(), at + 16
        elif type(value) is int:
            value = f"{value // 1_000_000}.{value % 1_000_000:06d}"
        elif type(value) is not str:
            return None
        out.append(f"{encode_basestring(key)}:{encode_basestring(value)}")
    return "{" + ",".join(out) + "}" if at == len(tail) else None


def stored_hash(seq: int, digest: str) -> bytes:
    raw = bytes.fromhex(digest)
    return raw if seq % ANCHOR_EVERY == 0 else raw[:CHECK_BYTES]


def is_check(stored: object) -> bool:
    """Whether a stored hash is only its first bytes (the reader chains to the rest)."""
    return type(stored) is bytes and len(stored) == CHECK_BYTES


def hash_matches(stored: object, digest: str) -> bool:
    if is_check(stored):
        assert isinstance(stored, bytes)
        return digest[:2 * CHECK_BYTES] == stored.hex()
    return (stored.hex() if type(stored) is bytes else stored) == digest
