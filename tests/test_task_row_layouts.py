"""A task row in the compact layout (docs/tasks.md#storage) against one written before it
(schema 4, a JSON array of every field): the old row still reads, and as the same task
its compact form gives back, in fewer bytes. Owners are numbered as rows need them."""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from butler.engine.receipt_rows import Signer, Signers
from butler.engine.store import SqliteTaskStore
from butler.engine.task_row import decode_row, row_columns
from butler.storage import _names as storage_names
from internal.protocol.a2a.model import (
    Budget,
    CostNode,
    Part,
    StatusEntry,
    Task,
    TaskError,
    TaskRequest,
    TaskState,
)
from internal.signing import public_key_from_jwk, verify_jws
from tests.test_task_storage import echo

# A finished echo task as bench/storage.py built it at d642eda, with its receipt signer.
PROTECTED = (
    "eyJhbGciOiJFZERTQSIsImp3ayI6eyJjcnYiOiJFZDI1NTE5Iiwia3R5IjoiT0tQIiwieCI6Il9hT2x6YVIyMW"
    "Qxak5GbThJVTRyWTBkSEwtTVVCMVJuY1l3RHI3dDgzRk0ifSwia2lkIjoiUmJqd0h0UGhkTk9oVHBiWDRoQjB0"
    "ZDd0dWlYb2tlMzNVSWlHd18zMDFLQSIsInR5cCI6ImJ1dGxlci1yZWNlaXB0K2p3cyJ9")
SIGNERS = Signers([Signer(1, PROTECTED, "bench", "http://127.0.0.1:8081")])
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


def test_a_schema_4_row_reads_with_its_receipt_still_verifying() -> None:
    task = decode_row(*OLD_ROW, signers=SIGNERS)
    assert (task.owner, task.skill, task.request.text, task.request.skill) == (
        "caller-5", "echo", "hello", "echo")
    assert task.chain == ("caller-5",) and task.trace_id == "4b7d07a8f3b165223b9d45d6cab394bb"
    assert [h.state.value for h in task.history] == ["submitted", "working", "completed"]
    assert task.history[-1].at == task.updated_at != task.created_at
    (receipt,) = task.receipts
    header = json.loads(base64.urlsafe_b64decode(PROTECTED + "=="))
    claims = json.loads(verify_jws(receipt, public_key_from_jwk(header["jwk"])))
    assert claims["task_id"] == task.wire_id and claims["trace_id"] == task.trace_id
    assert claims["receipt_id"] == "r-66b3898cf495679b548a1e0c03b875a4"


def test_the_compact_layout_gives_the_same_task_back_in_fewer_bytes() -> None:
    task = decode_row(*OLD_ROW, signers=SIGNERS)
    columns = row_columns(task, SIGNERS)
    assert columns[:5] == OLD_ROW[:5]
    body = columns[5]
    assert isinstance(body, bytes) and body.startswith(b"\x01")
    assert decode_row(*columns, signers=SIGNERS) == task
    text = body[1:body.index(b"\x00")]
    assert text == b'[762,"echo",1,["5.00","0"],["bench",0,"0",0,0],1,["hello",1],0,1,[[1]]]'
    assert len(body) < len(OLD_ROW[5]) - 100


async def test_owners_are_numbered_in_the_commit_that_first_needs_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage_names, "MAX_NAMES", 2)
    path = tmp_path / "tasks.db"
    store = await SqliteTaskStore.open(path)
    try:
        await asyncio.gather(*(store.put(echo(i, owner)) for i, owner in enumerate(
            ["alice", "bob", "alice"])))
        await store.put(echo(3, "carol"))  # no room left: kept as its text
        for owner, n in (("alice", 2), ("bob", 1), ("carol", 1)):
            page = await store.list_tasks(owner=owner, state=None, context_id=None,
                                          cursor=None, limit=10, by_update=True)
            assert ({t.owner for t in page.tasks}, len(page.tasks), page.total) == (
                {owner}, n, n)
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT name FROM task_owners ORDER BY ref").fetchall() == [
            ("alice",), ("bob",)]
        assert dict(conn.execute("SELECT typeof(owner), count(*) FROM tasks GROUP BY 1")) \
            == {"blob": 3, "text": 1}
    finally:
        conn.close()
    again = await SqliteTaskStore.open(path)  # the numbers are read back from the file
    try:
        assert {t.owner for t in (await again.list_tasks(
            owner=None, state=None, context_id=None, cursor=None, limit=10)).tasks} == {
            "alice", "bob", "carol"}
    finally:
        await again.close()


_texts = st.text(max_size=8)
_times = st.sampled_from(["2026-11-24T01:00:00.000000Z", "2026-11-24T01:00:02.500000Z", "",
                          "yesterday"]) | _texts


@st.composite
def _tasks(draw: st.DrawFn) -> Task:
    """Tasks that take each of the compact layout's marks, or just miss it."""
    owner, skill = draw(_texts), draw(_texts)
    state = draw(st.sampled_from(list(TaskState)))
    created, updated = draw(_times), draw(_times)
    text = draw(_texts)
    plain = (StatusEntry(TaskState.SUBMITTED, created), StatusEntry(TaskState.WORKING, created),
             StatusEntry(state, updated))
    history = draw(st.sampled_from([plain, (), plain[:2], (*plain[:2], StatusEntry(
        state, updated, "why")), (StatusEntry(state, draw(_times)),)]))
    node = CostNode(draw(_texts), draw(st.sampled_from([skill, "other"])),
                    Decimal(draw(st.sampled_from(["0", "0.10"]))), draw(st.integers(0, 9)),
                    draw(st.sampled_from([state.value, "failed"])),
                    draw(st.sampled_from([(), (CostNode("p", "s", Decimal("1"), 1, "x"),)])))
    return Task(
        id=draw(st.sampled_from(["01a17c89471d0bd128f60c05bf70ee21", "mine"])),
        context_id=draw(st.sampled_from(["01a17c89471d0bd128f60c05bf70ee22", "", "c"])),
        owner=owner, state=state,
        # (a request's skill is an id: never empty, which a row would read back as None)
        request=TaskRequest(text=text, skill=draw(st.sampled_from([None, skill or None,
                                                                   "other"])),
                            blocking=draw(st.booleans())),
        created_at=created, updated_at=updated, skill=skill, history=history,
        parts=draw(st.sampled_from([(), (Part(text=text),), (Part(text=text + "!"),),
                                    (Part(text=text), Part(text=text))])),
        budget=draw(st.sampled_from([None, Budget(Decimal("5.00")),
                                     Budget(Decimal("1"), Decimal("0.5"))])),
        cost=draw(st.sampled_from([None, node])),
        chain=draw(st.sampled_from([(), (owner,), (owner, "x"), ("x",)])),
        trace_id=draw(st.sampled_from(["f585e364d92702df7e9bbf5165b0705f", "", "t" * 32,
                                       "F585E364D92702DF7E9BBF5165B0705F"])),
        status_message=draw(_texts), reply_as_message=draw(st.booleans()),
        error=draw(st.sampled_from([None, TaskError("x", "y")])))


@settings(max_examples=300)
@given(task=_tasks())
def test_any_task_comes_back_from_the_compact_layout(task: Task) -> None:
    columns = row_columns(task)
    assert isinstance(columns[5], bytes) and columns[5][:1] == b"\x01"
    assert decode_row(*columns) == task
