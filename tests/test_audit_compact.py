"""Audit rows kept compact (schema 2, docs/audit.md#storage): names as numbers, a final
record's detail as an array with its receipt id as bytes, and most hashes as their first
four bytes, chained on from every 64th record's whole one. Each still reads back as the
record that was hashed, and verify still names the record that was edited."""

from __future__ import annotations

import itertools
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from butler.audit.log import GENESIS_HASH, AuditLog
from butler.audit.segments import export, segments, verify_history
from butler.storage import _names as storage_names
from tests.audit_support import documented_rows

FINAL = {"receipt": "r-" + "ab12" * 8, "seconds": "0.002808", "skill": "echo"}


def _task(log: AuditLog, i: int) -> None:
    base = {"caller": "operator", "task_id": f"{i:032x}", "chain": ["operator"],
            "trace_id": f"{i + 7:032x}", "budget_before": Decimal("5.0")}
    log.append_many([
        {"kind": "inbound", "budget_after": None, "decision": "accepted", **base},
        {"kind": "task_finished", "budget_after": Decimal("5.0"), "decision": "completed",
         "detail": FINAL, **base},
    ])


def _raw(path: Path, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        with conn:
            return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def test_a_tasks_two_records_are_stored_compactly_and_read_back_exactly(
        tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    with AuditLog(path) as log:
        _task(log, 1)
        inbound, final = log.tail(2)
        assert final.detail == FINAL and inbound.detail == {}
        assert (inbound.kind, inbound.caller, final.decision) == (
            "inbound", "operator", "completed")
        assert log.verify().ok
    ((kind, caller, decision, detail, digest),) = _raw(
        path, "SELECT kind, caller, decision, detail, hash FROM audit WHERE seq = 2")
    names = dict(_raw(path, "SELECT ref, name FROM audit_names"))
    assert {names[int.from_bytes(v, "big")] for v in (kind, caller, decision)} == {
        "task_finished", "operator", "completed"}  # type: ignore[arg-type]
    assert isinstance(detail, bytes) and len(detail) == len(b'[3,null,2808,"echo"]') + 17
    assert detail.endswith(bytes.fromhex("ab12" * 8))
    assert digest == bytes.fromhex(final.hash)[:4]
    assert [r["hash"] for r in documented_rows(path)] == [inbound.hash, final.hash]
    assert [r["detail"] for r in documented_rows(path)] == [
        "{}", '{"receipt":"r-' + "ab12" * 8 + '","seconds":"0.002808","skill":"echo"}']


def test_only_every_64th_hash_is_whole_and_every_read_chains_the_rest(
        tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    archive = tmp_path / "archive"
    with AuditLog(path, segment_records=100) as log:
        for i in range(75):
            _task(log, i)
        stored = dict(_raw(path, "SELECT seq, length(hash) FROM audit"))
        assert {seq for seq, n in stored.items() if n == 32} == {64, 128}
        records = list(log.iter_all())
        assert records[0].prev_hash == GENESIS_HASH
        for before, record in itertools.pairwise(records):
            assert record.prev_hash == before.hash == before.compute_hash()
        assert log.tail(3) == records[-3:]
        assert log.head() == (150, records[-1].hash)
        assert [r["hash"] for r in documented_rows(path)] == [r.hash for r in records]
        (segment,) = segments(log)
        assert segment.last_hash == records[99].hash
        export(log, segment, archive)
        assert verify_history(log, archive).ok
        assert log.verify().checked == 150


@pytest.mark.parametrize("seq", [1, 63, 64, 70])
def test_an_edited_record_is_named_whether_it_keeps_its_hash_whole_or_not(
        tmp_path: Path, seq: int) -> None:
    path = tmp_path / "audit.db"
    with AuditLog(path) as log:
        for i in range(40):
            _task(log, i)
    _raw(path, "UPDATE audit SET budget_before = '6.0' WHERE seq = ?", (seq,))
    with AuditLog(path) as log:
        result = log.verify()
        assert (result.ok, result.first_bad_seq) == (False, seq)


def test_a_number_no_name_has_is_an_edited_record(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    with AuditLog(path) as log:
        _task(log, 1)
    _raw(path, "UPDATE audit SET kind = x'7f' WHERE seq = 2")
    with AuditLog(path) as log:
        result = log.verify()
        assert (result.ok, result.first_bad_seq) == (False, 2)
        assert "kind is not text" in result.reason


def test_past_the_names_a_file_holds_texts_are_kept_as_they_are(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage_names, "MAX_NAMES", 3)
    path = tmp_path / "audit.db"
    with AuditLog(path) as log:
        _task(log, 1)  # inbound, operator, accepted; then no room for the rest
        assert log.tail(2)[1].detail == FINAL
        assert log.verify().ok
    assert _raw(path, "SELECT kind, caller, decision, detail FROM audit WHERE seq = 2") == [
        ("task_finished", b"\x02", "completed", '{"receipt":"r-' + "ab12" * 8
         + '","seconds":"0.002808","skill":"echo"}')]


def test_a_version_1_log_gains_its_names_and_goes_on(tmp_path: Path) -> None:
    """Its rows (texts, whole hashes) read as they are; new rows are compact."""
    path = tmp_path / "audit.db"
    with AuditLog(path) as log:
        _task(log, 1)
        first = log.tail(2)
    conn = sqlite3.connect(path)
    with conn:  # the same two records as version 1 stored them
        for record in first:
            conn.execute("UPDATE audit SET kind = ?, caller = ?, decision = ?, detail = ?, "
                         "hash = ? WHERE seq = ?",
                         (record.kind, record.caller, record.decision,
                          "{}" if not record.detail else
                          '{"receipt":"r-' + "ab12" * 8
                          + '","seconds":"0.002808","skill":"echo"}',
                          bytes.fromhex(record.hash), record.seq))
        conn.execute("DROP TABLE audit_names")
        conn.execute("PRAGMA user_version = 1")
    conn.close()
    with AuditLog(path) as log:
        assert log.tail(2) == first
        _task(log, 2)
        assert log.verify().checked == 4
        assert [r.detail for r in log.iter_all()] == [{}, FINAL, {}, FINAL]
    assert _raw(path, "PRAGMA user_version") == [(2,)]
