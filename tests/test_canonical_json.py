"""The bytes of Butler's one canonical JSON encoder (RFC 8785), pinned for values that
tell encoders apart: whatever is hashed or signed (audit records, receipts, card
signatures) must hash the same in every later release."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from internal.signing import Encoded, NotCanonical, canonical

PINNED: list[tuple[Any, str]] = [
    ({}, "{}"),
    ([], "[]"),
    ("", '""'),
    ({"é": "日本", "emoji": "😀", "a": "café"}, '{"a":"café","emoji":"😀","é":"日本"}'),
    ('"\\\n\t\b\f\r\x00\x1f\x7f\u2028/', '"\\"\\\\\\n\\t\\b\\f\\r\\u0000\\u001f\x7f\u2028/"'),
    ([2**53 - 1, -(2**53 - 1), 0, -1], "[9007199254740991,-9007199254740991,0,-1]"),
    (["0.10", "1E+2", "123456789012345678901234567890"],
     '["0.10","1E+2","123456789012345678901234567890"]'),
    ([Decimal("0.10"), Decimal("1E+2"), Decimal("-0.0")], "[0.1,100,0]"),
    ([1.0, 1e21, 1e-7, 0.1 + 0.2, -0.0, 5e-324], "[1,1e+21,1e-7,0.30000000000000004,0,5e-324]"),
    ({"b": [1, {"d": [], "c": {}}], "a": None, "t": [True, False]},
     '{"a":null,"b":[1,{"c":{},"d":[]}],"t":[true,false]}'),
    ({"\ufb01": 1, "\U0001F600": 2, "z": 3}, '{"z":3,"\U0001F600":2,"\ufb01":1}'),
    ({"b": Encoded('{"x":1.0}'), "a": 1}, '{"a":1,"b":{"x":1.0}}'),
]


@pytest.mark.parametrize(("value", "text"), PINNED)
def test_canonical_bytes_are_pinned(value: Any, text: str) -> None:
    assert canonical(value) == text.encode("utf-8")


@pytest.mark.parametrize("value", [
    2**53, -(2**53), float("nan"), float("inf"), "\ud800", {1: "x"}, {"a": object()}])
def test_a_value_without_a_canonical_form_is_refused(value: Any) -> None:
    with pytest.raises(NotCanonical):
        canonical(value)
