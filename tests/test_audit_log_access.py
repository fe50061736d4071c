"""Reading the audit log while it grows (``tail``, ``iter_all``), appends from many
threads and from two handles on one file, and the file's permissions."""

from __future__ import annotations

import os
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from butler.audit import AuditLog, VerifyResult
from tests.audit_support import append_record, fill_log


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "audit.db"


@pytest.fixture
def log(db_path: Path) -> Iterator[AuditLog]:
    with AuditLog(db_path) as audit_log:
        yield audit_log


def test_tail_order(log: AuditLog) -> None:
    fill_log(log, 30)

    assert [r.seq for r in log.tail(5)] == [26, 27, 28, 29, 30]
    assert [r.seq for r in log.tail()] == list(range(11, 31))
    assert [r.seq for r in log.tail(100)] == list(range(1, 31))
    assert log.tail(0) == []


def test_iter_all_spans_pages_and_allows_appends(log: AuditLog) -> None:
    fill_log(log, 600)
    seen = []
    for record in log.iter_all():
        seen.append(record.seq)
        if record.seq == 1:
            append_record(log, 1000)  # must not deadlock on the log's lock
    assert seen == list(range(1, 602))


def test_concurrent_appends_from_threads(log: AuditLog) -> None:
    threads_n, per_thread = 8, 40
    errors: list[BaseException] = []
    start = threading.Barrier(threads_n)

    def worker(t: int) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                append_record(log, t * 1000 + i, caller=f"thread-{t}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    total = threads_n * per_thread
    assert log.verify() == VerifyResult(ok=True, checked=total, first_bad_seq=None, reason="ok")
    assert [r.seq for r in log.iter_all()] == list(range(1, total + 1))


def test_two_handles_on_one_file_share_the_chain(db_path: Path) -> None:
    with AuditLog(db_path) as a, AuditLog(db_path) as b:
        for i in range(6):
            append_record(a if i % 2 == 0 else b, i)
        assert a.verify().ok
        assert b.verify().checked == 6


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_new_file_is_private(db_path: Path) -> None:
    with AuditLog(db_path) as log:
        append_record(log)
    assert stat.S_IMODE(os.stat(db_path).st_mode) == 0o600
