"""Audit rows as schema 3 stores them (docs/audit.md#storage): named text columns and the
detail as keyed JSON; and every earlier layout migrated to it once, in place, in one
transaction, every record reading back as it was and the chain verifying as before.

The files under tests/fixtures/audit were written by the schema 2 code (commit 1f07424):
``audit-v2`` a data folder with 64 records in segments of 16, the first exported and
dropped; ``audit-v1.db`` and ``audit-v0.db`` the same records as versions 1 and 0 stored
them; ``records.json`` every record as that code read it back."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from butler.audit import migrate
from butler.audit.log import AuditLog, VerifyResult
from butler.audit.segments import retire, verify_history
from butler.storage import CannotOpen
from tests.audit_support import documented_rows

FIXTURES = Path(__file__).parent / "fixtures" / "audit"
GOLDEN = json.loads((FIXTURES / "records.json").read_text(encoding="utf-8"))
DROPPED = 16  # the v2 folder's first segment is exported and dropped
FINAL = {"receipt": "r-" + "ab12" * 8, "seconds": "0.002808", "skill": "echo"}


def _raw(path: Path, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        with conn:
            return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def _golden(tmp_path: Path, version: int) -> Path:
    """A copy of the fixture of layout ``version``: the audit file's path."""
    if version == 2:
        return shutil.copytree(FIXTURES / "audit-v2", tmp_path / "data") / "audit.db"
    return Path(shutil.copy(FIXTURES / f"audit-v{version}.db", tmp_path / "audit.db"))


def _content(path: Path) -> str:
    """Everything the file holds, as SQL: equal before and after means untouched."""
    conn = sqlite3.connect(path)
    try:
        return hashlib.sha256("\n".join(conn.iterdump()).encode()).hexdigest() + str(
            conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def test_a_record_is_stored_as_named_text_columns_and_keyed_json(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    with AuditLog(path) as log:
        inbound, final = log.append_many([
            {"kind": "inbound", "caller": "operator", "task_id": "ab" * 16,
             "chain": ["operator"], "budget_before": Decimal("5.0"), "budget_after": None,
             "decision": "accepted"},
            {"kind": "task_finished", "caller": "operator", "task_id": "ab" * 16,
             "chain": ["operator"], "budget_before": Decimal("5.0"),
             "budget_after": Decimal("4.75"), "decision": "completed", "detail": FINAL}])
        assert log.tail(2) == [inbound, final]
        assert log.verify().ok
    rows = documented_rows(path)
    assert rows[1] == {
        "seq": 2, "at": final.at, "kind": "task_finished", "caller": "operator",
        "task_id": "ab" * 16, "chain": '["operator"]', "budget_before": "5.0",
        "budget_after": "4.75", "decision": "completed", "code": None, "trace_id": None,
        "detail": '{"receipt":"r-' + "ab12" * 8 + '","seconds":"0.002808","skill":"echo"}',
        "prev_hash": inbound.hash, "hash": final.hash}
    assert _raw(path, "SELECT DISTINCT typeof(at) || typeof(kind) || typeof(hash) "
                "|| typeof(prev_hash) FROM audit") == [("text" * 4,)]
    assert _raw(path, "PRAGMA user_version") == [(3,)]


@pytest.mark.parametrize("version", [2, 1, 0])
def test_a_golden_file_reads_back_identically_and_verifies_after_migration(
        tmp_path: Path, version: int) -> None:
    path = _golden(tmp_path, version)
    live = DROPPED if version == 2 else 0
    with AuditLog(path) as log:
        assert [r.to_json() for r in log.iter_all()] == GOLDEN["records"][live:]
        assert log.tail(3) == list(log.iter_all())[-3:]
        assert log.head() == tuple(GOLDEN["head"])
        assert log.verify() == VerifyResult(True, 64 - live, None, "ok")
        if version == 2:
            assert verify_history(log, path.parent / "audit-archive").ok
        nxt = log.append("inbound", caller="c", task_id=None, chain=["c"],
                         budget_before=None, budget_after=None, decision="accept")
        assert nxt.prev_hash == GOLDEN["head"][1]
        assert log.verify().ok
    assert _raw(path, "PRAGMA user_version") == [(3,)]
    assert _raw(path, "SELECT name FROM sqlite_master WHERE name IN "
                "('audit_names', 'audit_old')") == []
    with AuditLog(path) as log:  # migrated once: the next open finds schema 3
        assert log.verify().ok


def test_an_old_record_keeps_the_hash_of_the_text_it_was_hashed_as(tmp_path: Path) -> None:
    """Appended by an older Butler, a detail with a float (``1.0``), an integer past 2**53
    and a key past the BMP was hashed as ``json.dumps`` wrote it, which is not its
    RFC 8785 form: the stored text is hashed as it is, so it still verifies."""
    path = _golden(tmp_path, 1)
    with AuditLog(path) as log:
        (odd,) = [r for r in log.iter_all() if r.caller == "legacy numbers"]
        assert odd.detail["big"] == 2**60 and odd.detail["float"] == 1.0
        assert odd.compute_hash() == odd.hash
        assert log.verify().ok


@pytest.mark.parametrize(("version", "seq"), [(2, 40), (2, 64), (1, 5), (0, 63)])
def test_a_record_edited_before_migration_is_still_named_by_verify(
        tmp_path: Path, version: int, seq: int) -> None:
    """Seq 40 keeps 4 bytes of its hash in version 2, seq 64 the whole of it."""
    path = _golden(tmp_path, version)
    _raw(path, "UPDATE audit SET budget_before = '6.0' WHERE seq = ?", (seq,))
    with AuditLog(path) as log:
        result = log.verify()
    assert (result.ok, result.first_bad_seq) == (False, seq)
    assert "edited record" in result.reason


def test_a_record_edited_after_migration_is_named(tmp_path: Path) -> None:
    path = _golden(tmp_path, 2)
    AuditLog(path).close()
    _raw(path, "UPDATE audit SET detail = '{\"receipt\": \"r-x\"}' WHERE seq = 30")
    with AuditLog(path) as log:
        result = log.verify()
    assert (result.ok, result.checked, result.first_bad_seq) == (False, 29 - DROPPED, 30)


def test_a_file_from_a_newer_butler_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = _golden(tmp_path, 2)
    AuditLog(path).close()
    _raw(path, "PRAGMA user_version = 4")
    before = _content(path)
    with pytest.raises(CannotOpen, match=r"audit.db: audit database has schema 4, newer "
                       r"than this Butler's \(3\)"):
        AuditLog(path)
    assert _content(path) == before


def test_a_migration_that_fails_midway_leaves_the_old_file_and_the_next_open_does_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _golden(tmp_path, 2)
    before = _content(path)
    rewritten = migrate._rewritten
    calls = 0

    def fail_at_30(*args: Any) -> tuple[Any, ...]:
        nonlocal calls
        calls += 1
        if calls == 30:
            raise OSError("disk full")
        return rewritten(*args)

    monkeypatch.setattr(migrate, "_CHUNK", 8)
    monkeypatch.setattr(migrate, "_rewritten", fail_at_30)
    with pytest.raises(CannotOpen, match="disk full"):
        AuditLog(path)
    assert _content(path) == before
    monkeypatch.setattr(migrate, "_rewritten", rewritten)
    with AuditLog(path) as log:
        assert [r.to_json() for r in log.iter_all()] == GOLDEN["records"][DROPPED:]
        assert log.verify().ok


_KILLED_CHILD = r"""
import sys, threading
from pathlib import Path
from butler.audit import migrate
from butler.audit.log import AuditLog

class Held:
    # Passes the first progress line on, then holds the migration where it is, its
    # transaction open and some rows written, until the parent kills the process.
    progress = False

    def write(self, text):
        sys.__stderr__.write(text)
        sys.__stderr__.flush()
        if self.progress and text.endswith("\n"):
            threading.Event().wait()
        self.progress = self.progress or "rewritten" in text
    def flush(self):
        pass

migrate.PROGRESS_EVERY, migrate._CHUNK = 20, 8
sys.stderr = Held()
AuditLog(Path(sys.argv[1]))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_migration_killed_midway_leaves_the_old_file_and_the_next_start_completes_it(
        tmp_path: Path) -> None:
    path = _golden(tmp_path, 2)
    before = _content(path)
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_CHILD, str(path)], stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert child.stderr is not None
        line = child.stderr.readline()
        assert "audit schema 2 -> 3: 20 of 48 records rewritten" in line
        assert _raw(path, "PRAGMA user_version") == [(2,)]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stderr is not None:
            child.stderr.close()
    assert _content(path) == before
    with AuditLog(path) as log:
        assert [r.to_json() for r in log.iter_all()] == GOLDEN["records"][DROPPED:]
        assert log.verify().ok


def test_a_large_migration_shows_its_progress_on_stderr(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _golden(tmp_path, 1)
    monkeypatch.setattr(migrate, "PROGRESS_EVERY", 25)
    AuditLog(path).close()
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [
        "audit schema 1 -> 3: 25 of 64 records rewritten",
        "audit schema 1 -> 3: 50 of 64 records rewritten",
        "audit schema 1 -> 3: done, 64 records"]


def test_an_old_record_exported_and_dropped_still_verifies(tmp_path: Path) -> None:
    """Exported, the record of ``test_an_old_record_keeps_the_hash...`` is checked
    against its line as written, as the live log checks it against its stored text."""
    path = _golden(tmp_path, 1)
    with AuditLog(path) as log:
        (written,) = retire(log, datetime(2027, 1, 1, tzinfo=UTC), tmp_path / "archive")
        assert written.name == "audit-000000000001-000000000064.jsonl"
        assert list(log.iter_all()) == []
        assert verify_history(log, tmp_path / "archive") == VerifyResult(True, 64, None, "ok")
