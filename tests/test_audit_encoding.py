"""The stored audit format is the documented one, byte for byte, whatever the fields hold:
each row's hash is the SHA-256 of its payload's RFC 8785 form, checked against a reference
spelled here with json.dumps, and against a row written the documented way by hand."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from butler.audit import AuditLog
from butler.audit.log import GENESIS_HASH
from butler.audit.record import Entry
from tests.audit_support import documented_hash, documented_rows

COLUMNS = ["seq", "at", "kind", "caller", "task_id", "chain", "budget_before",
           "budget_after", "decision", "code", "trace_id", "detail", "prev_hash", "hash"]

# Quotes, backslashes, control characters, non-ASCII, U+2028 and lone surrogates.
texts = st.text(alphabet=st.sampled_from(list('a"\\\n\x00\x1fé✓\u2028\ud800')) | st.characters(),
                max_size=12)
amounts = st.none() | st.decimals(allow_nan=False, allow_infinity=False, places=4)
json_leaves = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | texts \
    | st.decimals(allow_nan=False, allow_infinity=False, places=2)
ascii_texts = st.text(alphabet=st.sampled_from(list('a"\\\n\x00\x1f/')) | st.characters(
    max_codepoint=127), max_size=12)
details = st.none() | st.dictionaries(texts, st.recursive(
    json_leaves, lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(texts, inner, max_size=3), max_leaves=6), max_size=4) \
    | st.dictionaries(ascii_texts, ascii_texts, max_size=4)  # strings only: the fast path
entries = st.fixed_dictionaries({
    "kind": texts, "caller": texts, "task_id": st.none() | texts,
    "chain": st.lists(texts, max_size=3), "budget_before": amounts, "budget_after": amounts,
    "decision": texts, "code": st.none() | texts, "trace_id": st.none() | texts,
    "detail": details,
})


def canonical(value: Any) -> str:
    """RFC 8785 for values without fractions: keys in UTF-16 order, which is code point
    order except against characters past the BMP."""
    return json.dumps(_utf16_order(value), separators=(",", ":"), ensure_ascii=False)


def _utf16_order(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _utf16_order(value[k]) for k in sorted(value, key=_utf16)}
    if isinstance(value, list):
        return [_utf16_order(v) for v in value]
    return value


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def stored_rows(path: Path) -> list[dict[str, Any]]:
    return documented_rows(path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(entries, min_size=1, max_size=4))
def test_rows_and_hashes_are_the_documented_encoding(batch: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "audit.db"
        with AuditLog(path) as log:
            records = log.append_many(batch)
            assert log.verify().ok
            assert log.tail(len(batch)) == records
        prev = GENESIS_HASH
        for row, record in zip(stored_rows(path), records, strict=True):
            assert row["chain"] == canonical(json.loads(row["chain"]))
            assert row["detail"] == canonical(json.loads(row["detail"]))
            assert row["prev_hash"] == prev
            payload = {k: v for k, v in row.items() if k != "hash"}
            payload["chain"] = json.loads(payload["chain"])
            payload["detail"] = json.loads(payload["detail"])
            assert row["hash"] == hashlib.sha256(canonical(payload).encode()).hexdigest()
            assert row["hash"] == record.hash == record.compute_hash()
            prev = row["hash"]


def test_write_many_continues_the_same_chain(tmp_path: Path) -> None:
    entry = {"kind": "inbound", "caller": "operator", "task_id": "t1", "chain": ["operator"],
             "budget_before": Decimal("1.00"), "budget_after": None, "decision": "accepted"}
    with AuditLog(tmp_path / "audit.db") as log:
        log.write_many([entry, entry])
        (third,) = log.append_many([entry])
        log.write_many([{**entry, "detail": {"n": Decimal("0.10")}}])
        assert third.seq == 3
        assert log.head()[0] == 4
        assert log.verify().ok
        assert log.tail(1)[0].detail == {"n": "0.10"}


def test_a_log_written_the_documented_way_verifies_and_continues(tmp_path: Path) -> None:
    """As an older Butler (or any JSON library) would have written it."""
    path = tmp_path / "audit.db"
    AuditLog(path).close()
    row: dict[str, Any] = {
        "seq": 1, "at": "2026-01-02T03:04:05.000006+00:00", "kind": "inbound",
        "caller": "peer-é", "task_id": None, "chain": canonical(["origin", "peer-é"]),
        "budget_before": "10.00", "budget_after": "7.25", "decision": "accept", "code": None,
        "trace_id": "ab" * 16, "detail": canonical({"note": "✓ \"q\"", "n": [1, 2]}),
        "prev_hash": GENESIS_HASH,
    }
    row["hash"] = documented_hash(row)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(f"INSERT INTO audit ({', '.join(COLUMNS)}) VALUES "
                     f"({', '.join('?' * len(COLUMNS))})", [row[c] for c in COLUMNS])
        conn.execute("UPDATE audit_head SET seq = 1, hash = ? WHERE id = 1", (row["hash"],))
    conn.close()
    with AuditLog(path) as log:
        assert log.verify().ok
        (old,) = log.tail(1)
        assert old.compute_hash() == row["hash"]
        nxt = log.append("task_finished", caller="peer-é", task_id="t", chain=["origin"],
                         budget_before=None, budget_after=None, decision="completed")
        assert nxt.prev_hash == row["hash"]
        assert log.verify().checked == 2
    _sql_edit(path, "UPDATE audit SET caller = 'peer-e' WHERE seq = 1")
    with AuditLog(path) as log:
        assert log.verify().first_bad_seq == 1


def _sql_edit(path: Path, statement: str) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(statement)
    conn.close()


@given(st.dictionaries(ascii_texts, ascii_texts, max_size=5))
def test_a_detail_of_ascii_strings_is_stored_as_its_json_round_trip(
        detail: dict[str, str]) -> None:
    entry = Entry(kind="k", caller="c", task_id=None, chain=(), budget_before=None,
                  budget_after=None, decision="d", detail=detail)
    assert entry.detail == json.loads(canonical(detail))
    assert entry.detail_text == canonical(entry.detail)


def test_a_number_no_canonical_form_holds_is_recorded_as_text_not_lost() -> None:
    """An integer past 2**53 has no RFC 8785 form: the record keeps its exact digits as
    text, rather than be lost or rounded."""
    entry = Entry(kind="k", caller="c", task_id=None, chain=(), budget_before=None,
                  budget_after=None, decision="d",
                  detail={"n": 2**60, "tokens": [1, -(2**70)], "ok": 2**53 - 1})
    assert entry.detail == {"n": "1152921504606846976",
                            "tokens": [1, "-1180591620717411303424"],
                            "ok": 2**53 - 1}
    assert entry.detail_text == canonical(entry.detail)
    with pytest.raises(ValueError):  # no JSON reading makes a NaN: still refused
        Entry(kind="k", caller="c", task_id=None, chain=(), budget_before=None,
              budget_after=None, decision="d", detail={"r": float("nan")})
