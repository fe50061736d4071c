"""A tasks.db of an earlier schema is migrated once, in place, in one transaction: its
rows read back as they were (receipts as the JWS they were signed as); a migration cut
short by a kill -9 leaves the old file as it was, and the next start completes it; a
file of a later schema is refused untouched. The schema 5 layout is in the golden data
folders (tests/test_golden_data.py); schema 0 in tests/test_task_storage.py."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import sqlite3
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from butler.engine.store import SqliteTaskStore
from butler.engine.task_schema import VERSION
from butler.storage import CannotOpen
from internal.protocol.a2a.model import TaskState
from internal.signing import public_key_from_jwk, verify_jws
from tests.support import REPO, child_env
from tests.test_task_storage import _V0_DDL, _v0_row, echo

# A finished echo task as a schema 4 file kept it (bench/storage.py at d642eda): a JSON
# array of every field by position, its receipt's id, digest and signature as bytes after
# a NUL, and its receipt signer numbered in ``receipt_signers``.
PROTECTED = (
    "eyJhbGciOiJFZERTQSIsImp3ayI6eyJjcnYiOiJFZDI1NTE5Iiwia3R5IjoiT0tQIiwieCI6Il9hT2x6YVIyMW"
    "Qxak5GbThJVTRyWTBkSEwtTVVCMVJuY1l3RHI3dDgzRk0ifSwia2lkIjoiUmJqd0h0UGhkTk9oVHBiWDRoQjB0"
    "ZDd0dWlYb2tlMzNVSWlHd18zMDFLQSIsInR5cCI6ImJ1dGxlci1yZWNlaXB0K2p3cyJ9")
OLD_ROW = (
    b"\x01\xa1{BDB\xc9DeQ \xa0X)T_", "caller-5",
    b"\x01\xa1{BDB\x00\x00\x00\x00\x00\x00\x00\x00\x00\x99", 4, 1793069302851337,
    b'[762,"echo",[[0,0],[1,0],[4,762]],["hello"],[],null,"",["5.00","0"],'
    b'["bench","echo","0",0,"completed",[]],["caller-5"],"4b7d07a8f3b165223b9d45d6cab394bb",'
    b'["hello","echo"],[],null,null,[[1]]]\x00f\xb3\x89\x8c\xf4\x95g\x9bT\x8a\x1e\x0c\x03'
    b"\xb8u\xa4@\xa3L\x04\xc0=\xf1\xd8\xb5-D\xf1\xf7\xdcF\xc2V&\x9de=kL\x94\x89-\xda\xe4"
    b"\x99\xc5I_\x86\xdd\x11\xad\xb8\x04MTB\x9bel\r\x94\x853\n\x8a\x10\xd8\x9b\xcc*u\xd5I:"
    b"\xb6\xc4\xc4p\x0b\xd4cG\x81JI\xa2\xb7]vo.\xd3ax\xcd\xc4\xcf\xbd\xab\x0e\x93\x9f\n\xd8"
    b"\xea\x87\xff\xbc\xce\x90\x0f")
_SCHEMA_4 = """
CREATE TABLE tasks (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL, context_id TEXT NOT NULL, state INTEGER NOT NULL,
    updated INTEGER NOT NULL, body TEXT NOT NULL);
CREATE TABLE task_counts (owner TEXT NOT NULL, state INTEGER NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY (owner, state)) WITHOUT ROWID;
CREATE TABLE receipt_signers (ref INTEGER PRIMARY KEY, protected TEXT NOT NULL UNIQUE,
    agent TEXT NOT NULL, url TEXT NOT NULL);
CREATE INDEX tasks_state ON tasks(state, seq);
CREATE TRIGGER tasks_counted AFTER INSERT ON tasks BEGIN
    INSERT INTO task_counts(owner, state, n) VALUES (new.owner, new.state, 1)
        ON CONFLICT(owner, state) DO UPDATE SET n = n + 1;
END;
PRAGMA user_version=4;
"""


def _schema_4_file(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(_SCHEMA_4)
    conn.execute("INSERT INTO receipt_signers VALUES (1, ?, 'bench', 'http://127.0.0.1:8081')",
                 (PROTECTED,))
    conn.execute("INSERT INTO tasks(id, owner, context_id, state, updated, body) "
                 "VALUES (?,?,?,?,?,?)", OLD_ROW)
    conn.commit()
    conn.close()


def _sql(path: Path, query: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


async def test_a_schema_4_file_is_migrated_with_its_receipt_still_verifying(
        tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    _schema_4_file(path)
    store = await SqliteTaskStore.open(path)
    try:
        (task,) = (await store.list_tasks(owner="caller-5", state=TaskState.COMPLETED,
                                          context_id=None, cursor=None, limit=5,
                                          by_update=True)).tasks
        assert (await store.list_tasks(owner="caller-5", state=None, context_id=None,
                                       cursor=None, limit=5, by_update=True)).total == 1
    finally:
        await store.close()
    assert (task.owner, task.skill, task.request.text, task.request.skill) == (
        "caller-5", "echo", "hello", "echo")
    assert task.chain == ("caller-5",) and task.trace_id == "4b7d07a8f3b165223b9d45d6cab394bb"
    assert [h.state.value for h in task.history] == ["submitted", "working", "completed"]
    (receipt,) = task.receipts
    header = json.loads(base64.urlsafe_b64decode(PROTECTED + "=="))
    claims = json.loads(verify_jws(receipt, public_key_from_jwk(header["jwk"])))
    assert claims["task_id"] == task.wire_id and claims["trace_id"] == task.trace_id
    assert claims["receipt_id"] == "r-66b3898cf495679b548a1e0c03b875a4"
    # One keyed row, the receipt in it as the text it was signed as; the old tables gone.
    assert _sql(path, "PRAGMA user_version") == [(VERSION,)]
    ((owner, state, document),) = _sql(path, "SELECT owner, state, document FROM tasks")
    assert (owner, state) == ("caller-5", "completed")
    assert isinstance(document, str) and json.loads(document)["receipts"] == [receipt]
    tables = {n for (n,) in _sql(path, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert not tables & {"receipt_signers", "task_owners", "tasks_old"}


async def test_a_file_of_a_later_schema_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE tasks (id TEXT)")
    conn.execute(f"PRAGMA user_version={VERSION + 1}")
    conn.commit()
    conn.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(CannotOpen) as caught:
        await SqliteTaskStore.open(path)
    assert f"schema {VERSION + 1}, newer than this Butler's ({VERSION})" in str(caught.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert _sql(path, "PRAGMA user_version") == [(VERSION + 1,)]


# The store's own migration, as a daemon's start runs it, held at its first progress
# line (mid-transaction) until it is killed.
_MIGRATE = """
import sqlite3, sys
from butler.engine.task_schema import create_schema

def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
    sys.stdin.read()

conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
create_schema(conn, progress)
"""


async def test_a_migration_killed_midway_leaves_the_old_file_and_the_next_start_completes_it(
        tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    tasks = [replace(echo(i, owner=("alice", "bob")[i % 2]), id=f"task-{i:06d}")
             for i in range(12_000)]
    conn = sqlite3.connect(path)
    conn.executescript(_V0_DDL)
    conn.executemany("INSERT INTO tasks(id, owner, context_id, state, terminal, updated_at, "
                     "body) VALUES (?,?,?,?,?,?,?)", [_v0_row(t) for t in tasks])
    conn.commit()
    conn.close()

    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _MIGRATE, str(path), cwd=REPO, env=child_env(),
        stdin=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert child.stderr is not None
    line = await asyncio.wait_for(child.stderr.readline(), 60)
    assert b"migrating to schema" in line and b"5000 of 12000 tasks" in line, line
    child.kill()  # mid-way: one chunk of three written, nothing committed
    await child.wait()

    assert _sql(path, "PRAGMA user_version") == [(0,)]
    assert _sql(path, "SELECT count(*) FROM tasks") == [(12_000,)]
    store = await SqliteTaskStore.open(path)
    try:
        assert await store.get("task-011999") == tasks[-1]
        page = await store.list_tasks(owner="bob", state=None, context_id=None, cursor=None,
                                      limit=3, by_update=True)
        assert page.total == 6_000
    finally:
        await store.close()
    assert _sql(path, "PRAGMA user_version") == [(VERSION,)]
