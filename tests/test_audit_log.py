from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from butler.audit import AuditError, AuditLog, VerifyResult
from butler.audit.log import GENESIS_HASH
from tests.audit_support import append_record, documented_hash, documented_rows, fill_log


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "audit.db"


@pytest.fixture
def log(db_path: Path) -> Iterator[AuditLog]:
    with AuditLog(db_path) as audit_log:
        yield audit_log


def _sql(path: Path, statement: str, params: tuple[Any, ...] = ()) -> None:
    """Tamper the way an operator with the sqlite3 CLI would: a separate connection."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute(statement, params)
    finally:
        conn.close()


def _raw_row(path: Path, seq: int) -> dict[str, Any]:
    (row,) = [r for r in documented_rows(path) if r["seq"] == seq]
    return row


def test_append_and_verify_ok(log: AuditLog) -> None:
    kinds = ["inbound", "delegation_sent", "delegation_result", "task_finished", "refusal"]
    records = [append_record(log, i, kind=kind) for i, kind in enumerate(kinds)]

    assert [r.seq for r in records] == [1, 2, 3, 4, 5]
    assert records[0].prev_hash == GENESIS_HASH
    for prev, cur in itertools.pairwise(records):
        assert cur.prev_hash == prev.hash
    assert log.verify() == VerifyResult(ok=True, checked=5, first_bad_seq=None, reason="ok")
    assert log.head() == (5, records[-1].hash)
    assert list(log.iter_all()) == records


def test_hash_matches_documented_encoding(log: AuditLog, db_path: Path) -> None:
    record = append_record(log, detail={"note": "héllo ✓", "nested": {"b": 1, "a": [1, 2]}})
    assert len(record.hash) == 64
    assert documented_hash(_raw_row(db_path, 1)) == record.hash


def test_empty_log_verifies(log: AuditLog) -> None:
    assert log.verify() == VerifyResult(ok=True, checked=0, first_bad_seq=None, reason="ok")
    assert log.head() == (0, GENESIS_HASH)
    assert log.tail() == []


def test_schema_matches_spec(log: AuditLog, db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    try:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(audit)")]
        head_columns = [row[1] for row in conn.execute("PRAGMA table_info(audit_head)")]
        journal_mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()
    assert columns == [
        "seq", "at", "kind", "caller", "task_id", "chain", "budget_before", "budget_after",
        "decision", "code", "trace_id", "detail", "prev_hash", "hash",
    ]  # fmt: skip
    assert head_columns == ["id", "seq", "hash"]
    assert journal_mode == "wal"


def test_edit_decision_fails_at_that_seq(log: AuditLog, db_path: Path) -> None:
    fill_log(log, 4)
    _sql(db_path, "UPDATE audit SET decision = 'refuse' WHERE seq = 3")

    result = log.verify()
    assert not result.ok
    assert result.first_bad_seq == 3
    assert result.checked == 2
    assert "edited record" in result.reason


def test_edit_budget_fails(log: AuditLog, db_path: Path) -> None:
    fill_log(log, 3)
    _sql(db_path, "UPDATE audit SET budget_after = '1000' WHERE seq = 2")

    result = log.verify()
    assert (result.ok, result.first_bad_seq) == (False, 2)


# Each edit is one an operator could make with the sqlite3 CLI. Several keep the same
# meaning (0.30 vs 0.3, JSON whitespace, 1E+1 vs 1e1) to prove there is no normalisation.
@pytest.mark.parametrize(
    ("column", "value_sql"),
    [
        ("at", "'2000-01-01T00:00:00.000000+00:00'"),
        ("kind", "'refusal'"),
        ("caller", "'mallory'"),
        ("caller", "CAST(x'ff' AS TEXT)"),
        ("caller", "x'6167656e742d31'"),
        ("task_id", "NULL"),
        ("chain", "'[\"origin\"]'"),
        ("chain", '\'["origin", "agent-1"]\''),
        ("budget_before", "'10.000'"),
        ("budget_before", "NULL"),
        ("budget_after", "'7.250'"),
        ("budget_after", "'1E+1'"),
        ("decision", "'refuse'"),
        ("code", "'budget_exhausted'"),
        ("trace_id", "NULL"),
        ("detail", "'{}'"),
        ("detail", '\'{"n": 1, "skill": "memory.search"}\''),
        ("prev_hash", "'" + "f" * 64 + "'"),
        ("hash", "'" + "0" * 64 + "'"),
        ("seq", "20"),
    ],
)
def test_any_column_edit_fails(log: AuditLog, db_path: Path, column: str, value_sql: str) -> None:
    fill_log(log, 3)
    _sql(db_path, f"UPDATE audit SET {column} = {value_sql} WHERE seq = 2")

    result = log.verify()
    assert not result.ok, column
    assert result.first_bad_seq == 2


def test_budget_spelling_change_with_same_value_fails(log: AuditLog, db_path: Path) -> None:
    append_record(log, budget_before=Decimal("1E+1"))
    _sql(db_path, "UPDATE audit SET budget_before = '1e1' WHERE seq = 1")
    assert not log.verify().ok


def test_delete_middle_row_fails(log: AuditLog, db_path: Path) -> None:
    fill_log(log, 5)
    _sql(db_path, "DELETE FROM audit WHERE seq = 3")

    result = log.verify()
    assert (result.ok, result.first_bad_seq, result.checked) == (False, 3, 2)
    assert "missing record" in result.reason


def test_delete_last_row_fails_via_head(log: AuditLog, db_path: Path) -> None:
    fill_log(log, 4)
    _sql(db_path, "DELETE FROM audit WHERE seq = 4")

    result = log.verify()
    assert (result.ok, result.first_bad_seq, result.checked) == (False, 4, 3)
    assert "truncated" in result.reason


def test_delete_all_rows_fails_via_head(log: AuditLog, db_path: Path) -> None:
    fill_log(log, 2)
    _sql(db_path, "DELETE FROM audit")
    assert (log.verify().ok, log.verify().first_bad_seq) == (False, 1)


def test_rehashed_edit_breaks_the_next_link(log: AuditLog, db_path: Path) -> None:
    fill_log(log, 3)
    row = _raw_row(db_path, 2)
    row["decision"] = "refuse"
    _sql(
        db_path,
        "UPDATE audit SET decision = ?, hash = ? WHERE seq = 2",
        (row["decision"], documented_hash(row)),
    )

    result = log.verify()
    assert (result.ok, result.first_bad_seq) == (False, 3)
    assert "broken link" in result.reason


def test_appended_forged_row_fails_via_head(log: AuditLog, db_path: Path) -> None:
    records = fill_log(log, 2)
    row = _raw_row(db_path, 2)
    row.update(seq=3, prev_hash=records[-1].hash, decision="refuse")
    row["hash"] = documented_hash(row)
    _sql(db_path, f"INSERT INTO audit ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
         tuple(row.values()))  # fmt: skip

    result = log.verify()
    assert (result.ok, result.first_bad_seq) == (False, 3)


def test_deleted_head_fails_and_blocksappend_record(log: AuditLog, db_path: Path) -> None:
    fill_log(log, 2)
    _sql(db_path, "DELETE FROM audit_head")

    result = log.verify()
    assert not result.ok
    assert "audit_head" in result.reason
    with pytest.raises(AuditError):
        append_record(log)
    with pytest.raises(AuditError):
        log.head()


def test_reopen_does_not_heal_a_deleted_head(db_path: Path) -> None:
    with AuditLog(db_path) as log:
        fill_log(log, 2)
    _sql(db_path, "DELETE FROM audit_head")
    with AuditLog(db_path) as log:
        assert not log.verify().ok


def test_anchor_detects_a_full_rewrite(log: AuditLog, db_path: Path) -> None:
    fill_log(log, 3)
    anchor = log.head()
    assert log.verify(anchor=anchor).ok
    fill_log(log, 2)
    assert log.verify(anchor=anchor).ok

    # An attacker with write access rebuilds a self-consistent log from scratch.
    _sql(db_path, "DELETE FROM audit")
    _sql(db_path, "UPDATE audit_head SET seq = 0, hash = ?", (GENESIS_HASH,))
    append_record(log, 99)
    assert log.verify().ok
    result = log.verify(anchor=anchor)
    assert (result.ok, result.first_bad_seq) == (False, 2)

    fill_log(log, 3)
    result = log.verify(anchor=anchor)
    assert (result.ok, result.first_bad_seq) == (False, 3)


def test_reopen_continues_the_chain(db_path: Path) -> None:
    with AuditLog(db_path) as log:
        first = fill_log(log, 3)
    with AuditLog(db_path) as log:
        nxt = append_record(log, 3)
        assert nxt.seq == 4
        assert nxt.prev_hash == first[-1].hash
        assert log.verify() == VerifyResult(ok=True, checked=4, first_bad_seq=None, reason="ok")
        assert list(log.iter_all()) == [*first, nxt]


def test_decimals_round_trip_exactly(log: AuditLog, db_path: Path) -> None:
    before = Decimal("0.1") + Decimal("0.2")
    record = append_record(log, budget_before=before, budget_after=Decimal("1E+2"))

    raw = _raw_row(db_path, 1)
    assert (raw["budget_before"], raw["budget_after"]) == ("0.3", "1E+2")
    (read,) = log.tail(1)
    assert read == record
    assert read.budget_before == Decimal("0.3")
    assert str(read.budget_before) == "0.3"
    assert str(read.budget_after) == "1E+2"
    assert read.to_json()["budget_before"] == "0.3"
    assert log.verify().ok


def test_rejects_float_and_non_finite_budgets(log: AuditLog) -> None:
    with pytest.raises(TypeError):
        append_record(log, budget_before=0.3)
    with pytest.raises(ValueError):
        append_record(log, budget_after=Decimal("NaN"))
    with pytest.raises(ValueError):
        append_record(log, budget_after=Decimal("Infinity"))
    assert log.head() == (0, GENESIS_HASH)


def test_rejects_bad_chain_and_detail(log: AuditLog) -> None:
    with pytest.raises(TypeError):
        append_record(log, chain="origin")
    with pytest.raises(TypeError):
        append_record(log, chain=["origin", 7])
    with pytest.raises(TypeError):
        append_record(log, detail={"when": object()})
    with pytest.raises(ValueError):
        append_record(log, detail={"x": float("nan")})
    assert log.head() == (0, GENESIS_HASH)


def test_detail_decimals_stored_as_strings(log: AuditLog) -> None:
    record = append_record(log, detail={"cost": Decimal("0.10"), "hops": (1, 2)})
    assert record.detail == {"cost": "0.10", "hops": [1, 2]}
    assert log.tail(1) == [record]


def test_lone_surrogates_do_not_breakappend_record(log: AuditLog) -> None:
    record = append_record(log, caller="peer-\ud800", chain=["\udfff"], detail={"k\ud800": "v"})
    assert record.caller == "peer-?"
    assert record.chain == ("?",)
    assert record.detail == {"k?": "v"}
    assert log.verify().ok


def test_to_json(log: AuditLog) -> None:
    record = append_record(log, budget_after=None, code="ok")
    data = record.to_json()

    assert data["chain"] == ["origin", "agent-0"]
    assert data["budget_before"] == "10.00"
    assert data["budget_after"] is None
    assert data["hash"] == record.hash
    assert set(data) == {
        "seq", "at", "kind", "caller", "task_id", "chain", "budget_before", "budget_after",
        "decision", "code", "trace_id", "detail", "prev_hash", "hash",
    }  # fmt: skip
    json.dumps(data)
    data["detail"]["n"] = 123
    assert record.detail["n"] == 0
