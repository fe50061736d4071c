"""Audit segments: retention exports and drops old ones, the live log verifies from the
last sealed hash, the exports and the live log verify as one history, and a version 0
file is migrated in place with its chain."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from butler.audit.log import GENESIS_HASH, AuditLog, append_entries
from butler.audit.record import Entry
from butler.audit.segments import (
    FORMAT,
    _mark_dropped,
    export,
    export_in_child,
    retire,
    segments,
    verify_history,
)
from tests.support import ECHO, Swarm, post_task, run_cli, wait_until

NOW = datetime.now(UTC)


def _entries(n: int, start: int = 0) -> list[Entry]:
    return [Entry(kind="inbound", caller="alice", task_id=f"t-{start + i}", chain=["alice"],
                  budget_before=None, budget_after=None, decision="accepted")
            for i in range(n)]


def _append(log: AuditLog, n: int, when: datetime, start: int = 0) -> None:
    stamp = when.isoformat(timespec="microseconds")
    log.db.call(append_entries, _entries(n, start), [stamp] * n, log.segment_records,
                write=True)


def test_retention_exports_then_drops_and_the_history_still_verifies(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    with AuditLog(tmp_path / "audit.db") as log:
        _append(log, 6, NOW - timedelta(days=10))
        assert retire(log, NOW - timedelta(days=5), archive) == [
            archive / "audit-000000000001-000000000006.jsonl"]
        _append(log, 4, NOW, start=6)
        assert retire(log, NOW - timedelta(days=5), archive) == []  # nothing new expired

        assert [r.seq for r in log.iter_all()] == [7, 8, 9, 10]
        assert log.tail(1)[0].seq == 10
        assert log.tail(4)[0].prev_hash == segments(log)[0].last_hash
        live = log.verify()
        assert (live.ok, live.checked) == (True, 4)
        whole = verify_history(log, archive)
        assert (whole.ok, whole.checked) == (True, 10)

        lines = (archive / "audit-000000000001-000000000006.jsonl").read_text().splitlines()
        header = json.loads(lines[0])
        assert header["format"] == FORMAT and header["prev_hash"] == GENESIS_HASH
        assert [json.loads(line)["seq"] for line in lines[1:]] == [1, 2, 3, 4, 5, 6]

        edited = json.loads(lines[3])
        edited["decision"] = "refused"
        lines[3] = json.dumps(edited)
        (archive / "audit-000000000001-000000000006.jsonl").write_text("\n".join(lines))
        bad = verify_history(log, archive)
        assert (bad.ok, bad.first_bad_seq) == (False, 3)
        assert "audit-000000000001-000000000006.jsonl" in bad.reason
        assert log.verify().ok  # the live log alone does not need the exports


def test_a_drop_cut_short_by_a_crash_is_finished_by_the_next_pass(tmp_path: Path) -> None:
    with AuditLog(tmp_path / "audit.db", segment_records=3) as log:
        _append(log, 3, NOW - timedelta(days=10))
        _append(log, 2, NOW, start=3)
        export(log, segments(log)[0], tmp_path / "archive")
        log.db.call(_mark_dropped, 3, write=True)  # the crash: nothing deleted yet
        assert [r.seq for r in log.iter_all()] == [4, 5]
        assert [r.seq for r in log.tail(10)] == [4, 5]
        assert (log.verify().ok, log.verify().checked) == (True, 2)
        assert verify_history(log, tmp_path / "archive").checked == 5
        retire(log, NOW - timedelta(days=5), tmp_path / "archive")
        assert log.db.call(lambda conn: conn.execute(
            "SELECT min(seq) FROM audit").fetchone()[0]) == 4


def test_a_missing_export_is_reported(tmp_path: Path) -> None:
    with AuditLog(tmp_path / "audit.db") as log:
        _append(log, 3, NOW - timedelta(days=10))
        retire(log, NOW - timedelta(days=5), tmp_path / "archive")
        _append(log, 2, NOW, start=3)
        result = verify_history(log, tmp_path / "elsewhere")
        assert (result.ok, result.first_bad_seq) == (False, 1)
        assert "no export holds records 1..3" in result.reason


def test_a_dropped_segment_edited_back_into_the_log_is_caught(tmp_path: Path) -> None:
    with AuditLog(tmp_path / "audit.db") as log:
        _append(log, 3, NOW - timedelta(days=10))
        retire(log, NOW - timedelta(days=5), tmp_path / "archive")
        _append(log, 2, NOW, start=3)
    conn = sqlite3.connect(tmp_path / "audit.db")
    with conn:
        conn.execute("UPDATE audit_segments SET last_hash = ?", ("f" * 64,))
    conn.close()
    with AuditLog(tmp_path / "audit.db") as log:
        result = log.verify()
        assert (result.ok, result.first_bad_seq) == (False, 4)


_V0_DDL = """
CREATE TABLE audit (
    seq INTEGER PRIMARY KEY, at TEXT NOT NULL, kind TEXT NOT NULL, caller TEXT NOT NULL,
    task_id TEXT, chain TEXT NOT NULL, budget_before TEXT, budget_after TEXT,
    decision TEXT NOT NULL, code TEXT, trace_id TEXT, detail TEXT NOT NULL,
    prev_hash TEXT NOT NULL, hash TEXT NOT NULL
);
CREATE TABLE audit_head (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL,
                         hash TEXT NOT NULL);
"""


def test_a_version_0_log_is_migrated_in_place_with_its_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    rows, prev = [], GENESIS_HASH
    for seq, entry in enumerate(_entries(5), start=1):
        rows.append(entry.row(seq, (NOW + timedelta(seconds=seq)).isoformat(), prev))
        prev = rows[-1][-1]
    conn = sqlite3.connect(path)
    conn.executescript(_V0_DDL)
    conn.executemany(f"INSERT INTO audit VALUES ({','.join('?' * 14)})", rows)
    conn.execute("INSERT INTO audit_head VALUES (1, 5, ?)", (prev,))
    conn.commit()
    conn.close()

    with AuditLog(path) as log:
        assert log.verify(anchor=(5, prev)).ok
        assert [r.hash for r in log.iter_all()] == [row[-1] for row in rows]
        assert log.append("task_finished", caller="alice", task_id="t-0", chain=["alice"],
                          budget_before=None, budget_after=None,
                          decision="completed").prev_hash == prev
        assert log.verify().checked == 6
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        assert conn.execute("SELECT count(*) FROM audit WHERE typeof(prev_hash) != 'text' "
                            "OR typeof(hash) != 'text' OR typeof(at) != 'text'"
                            ).fetchone()[0] == 0
    finally:
        conn.close()


def test_segments_seal_by_count_and_a_fully_dropped_log_goes_on(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    with AuditLog(tmp_path / "audit.db", segment_records=4) as log:
        for i in range(10):
            log.append("inbound", caller="alice", task_id=f"t-{i}", chain=["alice"],
                       budget_before=None, budget_after=None, decision="accepted")
        assert [(s.first_seq, s.last_seq) for s in segments(log)] == [(1, 4), (5, 8)]
        assert len(retire(log, NOW + timedelta(days=1), archive)) == 3
        assert (log.verify().ok, log.verify().checked, log.tail()) == (True, 0, [])
        record = log.append("inbound", caller="alice", task_id="t-10", chain=["alice"],
                            budget_before=None, budget_after=None, decision="accepted")
        assert record.seq == 11 and record.prev_hash == segments(log)[-1].last_hash
        assert log.tail() == [record]
        whole = verify_history(log, archive)
        assert (whole.ok, whole.checked) == (True, 11)


async def test_the_cli_exports_and_verifies_the_whole_history(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = tmp_path / "butler.yaml"
    config.write_text(json.dumps({"agent": {"id": "home"}, "data_dir": str(data)}))

    def fill() -> None:
        with AuditLog(data / "audit.db", segment_records=3) as log:
            _append(log, 7, NOW - timedelta(days=10))
            retire(log, NOW - timedelta(days=5), data / "audit-archive")  # 1..7 dropped
            _append(log, 3, NOW, start=7)  # 8..10 sealed (a batch seals as a whole)

    await asyncio.to_thread(fill)

    code, out, err = await run_cli("audit", "export", "--out", str(tmp_path / "out"),
                                   "-c", str(config))
    assert code == 0, err
    assert out.split() == [str(tmp_path / "out" / "audit-000000000008-000000000010.jsonl")]
    code, out, _ = await run_cli("audit", "verify", "-c", str(config))
    assert (code, out.strip()) == (0, "audit trail intact: 3 record(s) verified")
    code, out, _ = await run_cli("audit", "verify", "--exports", str(data / "audit-archive"),
                                 "-c", str(config))
    assert (code, out.strip()) == (0, "audit trail intact: 10 record(s) verified")
    code, out, _ = await run_cli("audit", "verify", "--exports", str(tmp_path / "out"),
                                 "-c", str(config))
    assert code == 1 and "no export holds records 1..7" in out


async def test_the_daemon_exports_and_drops_segments_past_retention(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO], extra={
        "audit": {"retention_days": 0.5 / 86400, "segment_records": 4}})
    for i in range(4):
        status, _ = await post_task(home, {"task": f"t{i}", "skill": "echo"})
        assert status == 200
    archive = home.daemon.config.data_dir / "audit-archive"
    database = home.daemon.config.data_dir / "audit.db"
    # The loop looks every second. A segment's file appears (the child's rename) before
    # the daemon marks it dropped, so wait for the mark, read as another process would.
    await wait_until(lambda: asyncio.to_thread(_dropped_segments, database), 30,
                     "a segment dropped")
    await swarm.stop(home)

    def check() -> None:
        with AuditLog(home.daemon.config.data_dir / "audit.db") as log:
            assert any(s.dropped for s in segments(log))
            assert log.verify().ok
            whole = verify_history(log, archive)
            assert whole.ok and whole.checked == 8, whole

    await asyncio.to_thread(check)


def test_a_segment_exported_by_a_child_process_is_the_same_file(tmp_path: Path) -> None:
    """The daemon's retention exports in a child process (``export_in_child``): the same
    file as an export in-process; a child that fails says so, and nothing is dropped."""
    with AuditLog(tmp_path / "audit.db", segment_records=3) as log:
        _append(log, 4, NOW - timedelta(days=10))
        (segment,) = segments(log)
        child = export_in_child(log, segment, tmp_path / "child")
        mine = export(log, segment, tmp_path / "mine")
        assert child.read_bytes() == mine.read_bytes()
        (tmp_path / "blocked").write_text("a file, not a folder")
        with pytest.raises(RuntimeError,
                           match=r"exporting audit records 1\.\.4 failed: FileExistsError"):
            retire(log, NOW, tmp_path / "blocked", export_in_child)
        assert not any(s.dropped for s in segments(log))


def _dropped_segments(database: Path) -> int:
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        found: int = conn.execute(
            "SELECT count(*) FROM audit_segments WHERE dropped = 1").fetchone()[0]
    finally:
        conn.close()
    return found
