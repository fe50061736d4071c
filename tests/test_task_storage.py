"""The task store's rows and indexes: keyed rows that give the task back, an index for
every listing, totals kept by triggers, and a version 0 file migrated in place."""

from __future__ import annotations

import dataclasses
import itertools
import json
import sqlite3
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from butler.engine.store import SqliteTaskStore
from butler.engine.task_document import MAX_DEPTH, NotStorable, task_from_row, task_row
from butler.engine.task_schema import VERSION
from internal.protocol.a2a.codec import butler_v2, exact_json
from internal.protocol.a2a.model import (
    Artifact,
    Budget,
    CostNode,
    Message,
    Part,
    PeerTask,
    StatusEntry,
    Task,
    TaskError,
    TaskRequest,
    TaskState,
    scoped_task_id,
)
from tests.plugins.garbage import NotJson, nested

T0 = "2026-11-24T01:00:00.000000Z"


def _stamp(second: int, micro: int = 0) -> str:
    return f"2026-11-24T01:{second // 60:02d}:{second % 60:02d}.{micro:06d}Z"


def echo(i: int, owner: str = "alice", context: str | None = None,
         state: TaskState = TaskState.COMPLETED) -> Task:
    at = _stamp(i % 3600, 500)
    return Task(
        id=f"task-{i:06d}", context_id=context or f"ctx-{i:06d}", owner=owner, state=state,
        request=TaskRequest(text="hello", skill="echo"), created_at=_stamp(i % 3600),
        updated_at=at, skill="echo",
        history=(StatusEntry(TaskState.SUBMITTED, _stamp(i % 3600)),
                 StatusEntry(TaskState.WORKING, _stamp(i % 3600)),
                 StatusEntry(state, at)),
        parts=(Part(text="hello"),), budget=Budget(Decimal("5.00")),
        cost=CostNode("home", "echo", Decimal("0"), 0, "completed"), chain=(owner,),
        trace_id="fa366379b67df6eec5514e19541a08a3")


def _round_trip(task: Task) -> Task:
    task_id, owner, context_id, state, _, document = task_row(task)
    return task_from_row(task_id, owner, context_id, state, document)


def _rich() -> Task:
    """A task with every field of its own, and of each type it holds, set."""
    message = Message(message_id="m1", role="user", parts=(Part(text="hi"),
                      Part(data={"n": 1, "x": 1.5}, metadata={"k": "v"})),
                      context_id="c", task_id="t", metadata={"a": [1]},
                      extensions=("x",), reference_task_ids=("r",), at=T0)
    return Task(
        id=scoped_task_id("mine", "bob"), context_id="c", owner="bob",
        state=TaskState.FAILED,
        request=TaskRequest(text="do", id="mine", context_id="c", input={"q": 1, "f": 0.5},
                            parts=(Part(file={"uri": "file:///x", "mimeType": "text/x"}),),
                            capabilities_needed=("a.b",), skill="s", blocking=False,
                            timeout_seconds=2.5, message=message),
        created_at=T0, updated_at="2026-11-24T01:00:01.250000Z", skill="s",
        history=(StatusEntry(TaskState.SUBMITTED, T0, "queued"),
                 StatusEntry(TaskState.FAILED, "not a time", "boom")),
        parts=(Part(text="a", metadata={"m": 1}), Part(text="b")),
        artifacts=(Artifact("art", (Part(text="x"),), "name", "desc", "lab"),),
        error=TaskError("skill_failed", "boom"), status_message="boom",
        budget=Budget(Decimal("1.10"), Decimal("0.25")),
        cost=CostNode("home", "s", Decimal("0.1"), 12, "failed",
                      (CostNode("peer", "t", Decimal("0.05"), 3, "completed"),)),
        chain=("op", "bob"), trace_id="t" * 32, messages=(message,), reply_as_message=True,
        receipts=("eyJhbGciOiJFZERTQSJ9.e30.c2ln", "eyJ9.e30.eA"), asked_by="lab",
        peer_task=PeerTask("office", "pt", "pc", "JSONRPC", "1.0", "http://o/a2a", "tree"))


def test_every_field_survives_the_keyed_row() -> None:
    rich = _rich()
    odd_times = Task(id="t", context_id="", owner="", state=TaskState.WORKING,
                     request=TaskRequest(text="x"), created_at="", updated_at="yesterday")
    no_times = replace(odd_times, updated_at="", chain=("",), skill="x",
                       cost=CostNode("", "x", Decimal("0"), 0, "working"))
    plain = replace(echo(8), history=(), trace_id="", chain=(), request=TaskRequest(
        text="hello", skill="other"), parts=(Part(text="hello", metadata={"m": 1}),))
    for task in (odd_times, no_times, plain, echo(7)):
        assert _round_trip(task) == task
    # A request's A2A message is not stored twice: the task's messages hold it.
    assert rich.request.message == rich.messages[0]
    assert _round_trip(rich) == replace(rich, request=replace(rich.request, message=None))


def test_a_row_names_its_fields_and_leaves_defaults_out() -> None:
    task_id, owner, context_id, state, updated, document = task_row(echo(7))
    assert (task_id, owner, context_id, state) == ("task-000007", "alice", "ctx-000007",
                                                   "completed")
    assert updated == 1795482007000500  # 2026-11-24T01:00:07.000500Z, for ordering
    assert json.loads(document) == {
        "request": {"text": "hello", "skill": "echo"}, "created_at": _stamp(7),
        "updated_at": _stamp(7, 500), "skill": "echo",
        "history": [{"state": "submitted", "at": _stamp(7)},
                    {"state": "working", "at": _stamp(7)},
                    {"state": "completed", "at": _stamp(7, 500)}],
        "parts": [{"text": "hello"}], "budget": {"start_usd": "5.00"},
        "cost": {"agent": "home", "skill": "echo", "cost_usd": "0", "duration_ms": 0,
                 "status": "completed"},
        "chain": ["alice"], "trace_id": "fa366379b67df6eec5514e19541a08a3"}


def test_the_round_trip_covers_every_field_of_a_task() -> None:
    """The codec follows the dataclasses' own fields: a field added to ``Task`` (or a type
    it holds) is stored with no edit to the codec. This keeps ``_rich`` setting every
    one, so the round trip above proves it."""
    values: list[Any] = [_rich()]
    fields_of: dict[str, set[str]] = {}
    set_somewhere: set[str] = set()
    while values:
        value = values.pop()
        kind = type(value).__name__
        for f in dataclasses.fields(value):
            fields_of.setdefault(kind, set()).add(f"{kind}.{f.name}")
            field_value = getattr(value, f.name)
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING
                else dataclasses.MISSING)
            if field_value != default:
                set_somewhere.add(f"{kind}.{f.name}")
            items = field_value if isinstance(field_value, tuple) else (field_value,)
            values += [v for v in items
                       if dataclasses.is_dataclass(v) and not isinstance(v, type)]
    every = set().union(*fields_of.values())
    assert every - set_somewhere == set()
    assert set(fields_of) == {"Task", "TaskRequest", "Message", "Part", "StatusEntry",
                              "Artifact", "TaskError", "Budget", "CostNode", "PeerTask"}


_texts = st.text(max_size=8)
_times = st.sampled_from(["2026-11-24T01:00:00.000000Z", "2026-11-24T01:00:02.500000Z", "",
                          "yesterday"]) | _texts


@st.composite
def _tasks(draw: st.DrawFn) -> Task:
    """Tasks with each field empty, at its default, or set, in the shapes runs leave."""
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
                                     Budget(Decimal("1"), Decimal("0.5")),
                                     Budget(Decimal("0"), Decimal("0.00"))])),
        cost=draw(st.sampled_from([None, node])),
        chain=draw(st.sampled_from([(), (owner,), (owner, "x"), ("x",)])),
        trace_id=draw(st.sampled_from(["f585e364d92702df7e9bbf5165b0705f", "", "t" * 32,
                                       "F585E364D92702DF7E9BBF5165B0705F"])),
        status_message=draw(_texts), reply_as_message=draw(st.booleans()),
        error=draw(st.sampled_from([None, TaskError("x", "y")])))


@settings(max_examples=300)
@given(task=_tasks())
def test_any_task_comes_back_from_its_row(task: Task) -> None:
    assert _round_trip(task) == task


@pytest.mark.parametrize(("data", "why"), [
    ({"text": "cut at an emoji \ud83d"}, "lone UTF-16 surrogate"),
    ({"x": NotJson()}, "no form for"),
    ({"deep": nested(MAX_DEPTH)}, "nested deeper"),
    ({"deeper": nested(5 * MAX_DEPTH)}, "nested deeper"),
])
def test_a_task_whose_output_has_no_json_form_is_not_storable(data: Any, why: str) -> None:
    with pytest.raises(NotStorable, match=why):
        task_row(replace(echo(1), parts=(Part(data=data),)))


def test_nan_and_infinities_are_kept_as_null_as_answers_give_them() -> None:
    for data in ({"n": float("nan"), "i": [float("-inf")]},
                 {"n": float("inf"), "big": 2**80}):
        task = replace(echo(1), parts=(Part(data=data),))
        assert _round_trip(task).parts[0].data == {
            k: None if isinstance(v, float) else [None] if isinstance(v, list) else v
            for k, v in data.items()}


def test_what_strict_json_can_keep_is_stored_exactly() -> None:
    """Integers past 64 bits, text of any plane, and nesting within the bound."""
    for data in ({"big": 2**80, "neg": -(2**70)}, {"t": "emoji \U0001f600 \u2028 \x00"},
                 {"deep": nested(MAX_DEPTH - 8)}):
        task = replace(echo(1), parts=(Part(data=data),))
        assert _round_trip(task) == task


def _plans(conn: sqlite3.Connection, statements: list[str]) -> list[str]:
    return [" / ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql))
            for sql in statements if sql.startswith("SELECT")]


async def test_every_listing_uses_an_index_in_its_order(tmp_path: Path) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.db")
    try:
        for i in range(50):
            await store.put(echo(i, owner=("alice", "bob")[i % 2], context="shared"))
        page = await store.list_tasks(owner=None, state=None, context_id=None, cursor=None,
                                      limit=2, by_update=True)
        first = await store.list_tasks(owner=None, state=None, context_id=None, cursor=None,
                                       limit=2)
        cursors: dict[bool, str | None] = {False: first.next_cursor, True: page.next_cursor}
        seen: list[str] = []
        await store._db.run(lambda conn: conn.set_trace_callback(seen.append))
        for owner, state, context, after, by_update, paged in itertools.product(
                (None, "alice"), (None, TaskState.COMPLETED), (None, "shared"),
                (None, _stamp(10)), (False, True), (False, True)):
            await store.list_tasks(owner=owner, state=state, context_id=context,
                                   cursor=cursors[by_update] if paged else None, limit=5,
                                   updated_after=after, by_update=by_update)
        await store._db.run(lambda conn: conn.set_trace_callback(None))
    finally:
        await store.close()
    conn = sqlite3.connect(tmp_path / "tasks.db")
    try:
        plans = _plans(conn, seen)
    finally:
        conn.close()
    assert len(plans) > 64
    for sql, plan in zip([s for s in seen if s.startswith("SELECT")], plans, strict=True):
        if "context_id=" in sql:
            # A context holds one conversation's tasks: found by index, then sorted.
            assert "INDEX tasks_context" in plan, (sql, plan)
            continue
        if "updated>=" in sql and "ORDER BY seq" in sql:
            continue  # no listing asks for this (a time filter comes with update order)
        if "UNION ALL" in sql:
            # One walk per state, each a page at most, merged: sorting those is bounded.
            walks = plan.count("SEARCH tasks USING COVERING INDEX tasks_")
            assert walks == 8 and sql.count(" LIMIT ") == 9, (sql, plan)
            assert "SCAN tasks" not in plan, (sql, plan)
            continue
        assert "TEMP B-TREE" not in plan, (sql, plan)
        filtered = any(f in sql for f in ("owner=", "state=", "updated>="))
        assert not filtered or "SEARCH" in plan or "task_counts" in sql, (sql, plan)


async def test_totals_follow_inserts_updates_and_purges(tmp_path: Path) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.db")
    try:
        for i in range(30):
            await store.put(echo(i, owner=("alice", "bob")[i % 2], state=TaskState.WORKING))
        for i in range(0, 30, 3):
            await store.put(echo(i, owner=("alice", "bob")[i % 2]))

        async def total(**filters: Any) -> int | None:
            page = await store.list_tasks(**{"owner": None, "state": None,
                                             "context_id": None, **filters},
                                          cursor=None, limit=1, by_update=True)
            return page.total

        assert await total() == 30
        assert await total(owner="alice") == 15
        assert await total(state=TaskState.WORKING) == 20
        assert await total(owner="bob", state=TaskState.COMPLETED) == 5
        purged = await store.purge_terminal(_stamp(3599))
        assert len(purged) == 10
        assert await total() == 20
        assert await total(state=TaskState.COMPLETED) == 0
    finally:
        await store.close()


_V0_DDL = """
CREATE TABLE tasks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    context_id TEXT NOT NULL,
    state TEXT NOT NULL,
    terminal INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX tasks_owner ON tasks(owner, seq);
CREATE INDEX tasks_context ON tasks(context_id, seq);
CREATE INDEX tasks_open ON tasks(terminal, updated_at);
CREATE INDEX tasks_owner_updated ON tasks(owner, updated_at, seq);
"""


def _v0_row(task: Task) -> tuple[Any, ...]:
    """How version 0 stored a task (``encode_row`` before the compact rows)."""
    rest: dict[str, Any] = {"owner": task.owner,
                            "request": butler_v2.encode_request(task.request)}
    if task.messages:
        rest["messages"] = [{
            "message_id": m.message_id, "role": m.role,
            "parts": [butler_v2.encode_part(p) for p in m.parts],
            "context_id": m.context_id, "task_id": m.task_id, "metadata": m.metadata,
            "extensions": list(m.extensions),
            "reference_task_ids": list(m.reference_task_ids), "at": m.at,
        } for m in task.messages]
    body = '{"task":' + butler_v2.task_json(task).decode() + "," + exact_json.dumps(rest)[1:]
    return (task.id, task.owner, task.context_id, task.state.value,
            int(task.state.terminal), task.updated_at, body)


async def test_a_version_0_file_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    message = Message(message_id="m1", role="user", parts=(Part(text="hi"),), at=T0)
    tasks = [echo(i, owner=("alice", "bob")[i % 2]) for i in range(40)]
    tasks[3] = echo(3, owner="bob", state=TaskState.WORKING)
    tasks[5] = replace(tasks[5], id=scoped_task_id("task-000005", "bob"), messages=(message,))
    conn = sqlite3.connect(path)
    conn.executescript(_V0_DDL)
    conn.executemany("INSERT INTO tasks(id, owner, context_id, state, terminal, updated_at, "
                     "body) VALUES (?,?,?,?,?,?,?)", [_v0_row(t) for t in tasks])
    conn.execute("DELETE FROM tasks WHERE id='task-000000'")  # a purged task: seq gap
    conn.commit()
    conn.close()

    store = await SqliteTaskStore.open(path)
    try:
        for task in tasks[1:]:
            assert await store.get(task.id) == task
        page = await store.list_tasks(owner="bob", state=None, context_id=None,
                                      cursor=None, limit=100, by_update=True)
        assert page.total == 20
        newest = await store.list_tasks(owner=None, state=None, context_id=None,
                                        cursor=None, limit=100)
        assert [t.id for t in newest.tasks] == [t.id for t in reversed(tasks[1:])]
        assert [t.id for t in await store.open_tasks()] == [tasks[3].id]
        await store.put(echo(99))
        assert (await store.list_tasks(owner=None, state=None, context_id=None, cursor=None,
                                       limit=1)).tasks[0].id == "task-000099"
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == VERSION
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
        assert conn.execute("SELECT max(seq) FROM tasks").fetchone()[0] == 41
    finally:
        conn.close()


async def test_new_files_give_purged_pages_back(tmp_path: Path) -> None:
    """Incremental auto-vacuum must be set before the switch to WAL writes the new file's
    first page: set after it, SQLite ignored it and purges never shrank the files."""
    from butler.audit import AuditLog

    store = await SqliteTaskStore.open(tmp_path / "tasks.db")
    await store.close()
    audit = await AuditLog.open(tmp_path / "audit.db")
    await audit.db.close()
    for name in ("tasks.db", "audit.db"):
        conn = sqlite3.connect(tmp_path / name)
        try:
            assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2, name  # INCREMENTAL
        finally:
            conn.close()


def test_state_codes_of_earlier_schemas_are_fixed() -> None:
    """Rows of schemas 1-5 carry these numbers; the migration reads them so."""
    from butler.engine.task_migration import STATE_CODES

    assert {c: s.value for c, s in STATE_CODES.items()} == {
        0: "submitted", 1: "working", 2: "input-required", 3: "auth-required",
        4: "completed", 5: "failed", 6: "canceled", 7: "rejected"}


async def test_listings_merged_across_states_page_in_order(tmp_path: Path) -> None:
    """An owner's tasks, and everyone's by last update, are one walk per state merged:
    every page must still be the next one in the one order, whatever states they hold."""

    states = list(TaskState)
    tasks = [replace(echo(i, owner=("alice", "bob")[i % 3 == 0], state=states[i % 8]),
                     updated_at=_stamp((i * 7) % 50, i)) for i in range(64)]
    store = await SqliteTaskStore.open(tmp_path / "tasks.db")
    try:
        for task in tasks:
            await store.put(task)
        for owner, by_update in itertools.product((None, "alice"), (False, True)):
            mine = [t for t in tasks if owner in (None, t.owner)]
            created = {t.id: n for n, t in enumerate(tasks)}  # seq: the order written
            expected = sorted(mine, reverse=True, key=lambda t: (
                t.updated_at if by_update else "", created[t.id]))
            got: list[str] = []
            cursor = None
            while True:
                page = await store.list_tasks(owner=owner, state=None, context_id=None,
                                              cursor=cursor, limit=7, by_update=by_update)
                got += [t.id for t in page.tasks]
                assert page.total == (len(mine) if by_update else None)
                if (cursor := page.next_cursor) is None:
                    break
            assert got == [t.id for t in expected], (owner, by_update)
    finally:
        await store.close()


@given(micros=st.integers(0, 253402300799999999))
def test_a_canonical_stamp_and_its_microseconds_give_each_other_back(micros: int) -> None:
    from butler.engine.task_document import micros_stamp, stamp_micros

    assert stamp_micros(micros_stamp(micros)) == micros


def test_only_the_canonical_form_orders_by_microseconds() -> None:
    from butler.engine.task_document import stamp_micros

    assert stamp_micros("2026-11-24T01:00:07.000500Z") == 1795482007000500
    for other in ("2026-11-24T01:00:07.000500+00:00", "2026-11-24T01:00:07Z", "yesterday",
                  "2026-13-24T01:00:07.000500Z", "2026-11-24 01:00:07.000500Z", ""):
        assert stamp_micros(other) is None, other
