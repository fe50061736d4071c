"""The task state machine (``butler.engine.transitions``): every state x every event,
as a table, plus properties of the pure function."""

from __future__ import annotations

import ast
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from butler.engine.transitions import (
    ArtifactAdded,
    Canceled,
    Event,
    Finished,
    InputReceived,
    InputRequested,
    Started,
    apply,
    created,
    failed,
    interrupted,
)
from internal.protocol.a2a.model import (
    Artifact,
    Budget,
    Message,
    Part,
    StateConflict,
    StatusEntry,
    Task,
    TaskRequest,
    TaskState,
)

S = TaskState
T0, T1 = "2030-01-01T00:00:00.000Z", "2030-01-01T00:00:01.000Z"
EVENTS: dict[str, Event] = {
    "started": Started(),
    "progress": Started("half way"),
    "input_requested": InputRequested("which one?"),
    "auth_requested": InputRequested("sign in first", auth=True),
    "input_received": InputReceived(Message(message_id="m1", role="user",
                                            parts=(Part(text="this"),))),
    "artifact": ArtifactAdded(Artifact(artifact_id="a1", parts=(Part(text="x"),))),
    "canceled": Canceled("operator"),
    "completed": Finished(S.COMPLETED, parts=(Part(text="done"),)),
    "failed": failed("boom", "it broke"),
    "rejected": failed("rejected", "not mine", S.REJECTED),
}
LIVE = (S.SUBMITTED, S.WORKING, S.INPUT_REQUIRED, S.AUTH_REQUIRED)
TERMINAL = (S.COMPLETED, S.FAILED, S.CANCELED, S.REJECTED)
# (state, event) -> the next state, or the StateConflict code.
TABLE: dict[tuple[S, str], S | str] = {}
for state in LIVE:
    TABLE.update({
        (state, "started"): S.WORKING, (state, "progress"): S.WORKING,
        (state, "input_requested"): S.INPUT_REQUIRED,
        (state, "auth_requested"): S.AUTH_REQUIRED,
        # A task waiting on its caller, for input or an authorisation, takes the answer.
        (state, "input_received"): S.WORKING if state in (S.INPUT_REQUIRED, S.AUTH_REQUIRED)
        else "task_not_waiting",
        (state, "artifact"): state, (state, "canceled"): S.CANCELED,
        (state, "completed"): S.COMPLETED, (state, "failed"): S.FAILED,
        (state, "rejected"): S.REJECTED,
    })
for state in TERMINAL:
    for name in EVENTS:
        TABLE[(state, name)] = "task_not_cancelable" if name == "canceled" else "task_terminal"


def task_in(state: TaskState) -> Task:
    return Task(id="t1", context_id="c1", owner="alice", state=state, request=TaskRequest(),
                created_at=T0, updated_at=T0, history=(StatusEntry(state, T0),),
                budget=Budget(Decimal("1")))


def test_the_table_covers_every_state_and_event() -> None:
    assert set(TABLE) == {(s, e) for s in TaskState for e in EVENTS}


@pytest.mark.parametrize(("state", "event"), sorted(TABLE, key=str))
def test_every_state_and_event(state: TaskState, event: str) -> None:
    task = task_in(state)
    expected = TABLE[(state, event)]
    if not isinstance(expected, TaskState):  # a StrEnum: test for it, not for str
        with pytest.raises(StateConflict) as info:
            apply(task, EVENTS[event], T1)
        assert info.value.code == expected
        return
    after = apply(task, EVENTS[event], T1)
    assert after.state is expected
    assert after.updated_at == T1 or after is task
    if expected is not state or event in ("progress", "input_requested", "auth_requested",
                                          "canceled",
                                          "failed", "rejected", "input_received"):
        assert after.history[-1].state is expected and after.history[-1].at == T1
        assert len(after.history) == len(task.history) + 1
    else:
        assert after.history == task.history


def test_what_each_event_records() -> None:
    working = task_in(S.WORKING)
    assert apply(working, Started(), T1) is working  # nothing to record
    waiting = apply(working, InputRequested("which one?"), T1)
    assert waiting.status_message == "which one?"
    answered = apply(waiting, EVENTS["input_received"], T1)
    assert answered.status_message == "input received"
    assert answered.messages[-1].task_id == "t1" and answered.messages[-1].at == T1
    done = apply(answered, Finished(S.COMPLETED, parts=(Part(text="ok"),)), T1)
    # A new state without a message clears the old one.
    assert done.status_message == "" and done.parts == (Part(text="ok"),)
    broke = apply(working, failed("boom", "it broke"), T1)
    assert broke.error is not None and broke.error.code == "boom"
    assert broke.status_message == "it broke"
    canceled = apply(working, Canceled("bob"), T1)
    assert canceled.history[-1].message == "canceled by bob"


def test_a_task_cut_off_gets_a_budget() -> None:
    cut = interrupted(replace(task_in(S.SUBMITTED), budget=None), "interrupted_by_restart",
                      "restarted", T1)
    assert cut.state is S.FAILED and cut.budget == Budget(Decimal("0"))
    assert cut.error is not None and cut.error.code == "interrupted_by_restart"


def test_finished_needs_a_terminal_state() -> None:
    with pytest.raises(ValueError, match="terminal"):
        Finished(S.WORKING)


@given(st.lists(st.sampled_from(sorted(EVENTS)), max_size=12))
def test_any_sequence_ends_terminal_for_good(names: list[str]) -> None:
    """Once terminal, a task never changes; time only moves forward; the history only
    grows."""
    task = task_in(S.SUBMITTED)
    for name in names:
        try:
            after = apply(task, EVENTS[name], T1)
        except StateConflict:
            assert task.state.terminal or name == "input_received"
            continue
        assert not task.state.terminal
        assert after.history[:len(task.history)] == task.history
        task = after


def test_a_run_does_not_import_the_engine() -> None:
    """``run.py`` talks to the engine through ``RunEngine``; no cycle, lazy or not."""
    source = Path(__file__).resolve().parent.parent / "butler" / "engine" / "run.py"
    imported = {node.module for node in ast.walk(ast.parse(source.read_text()))
                if isinstance(node, ast.ImportFrom)}
    assert "butler.engine.engine" not in imported



def test_a_task_created_running_is_the_submitted_one_started() -> None:
    """``created(running=True)`` spares the engine a copy, not a transition."""
    fields = {"id": "t1", "context_id": "c1", "owner": "alice", "skill": "echo",
              "request": TaskRequest(text="hi"), "budget": Budget(Decimal("1")),
              "chain": ("a",), "trace_id": "f" * 32}
    submitted = created(T0, running=False, **fields)
    assert submitted.state is S.SUBMITTED and submitted.history == (StatusEntry(S.SUBMITTED, T0),)
    assert created(T0, running=True, **fields) == apply(submitted, Started(), T0)
