"""The task state machine as one pure function: ``apply(task, event, at)``.

Given a task and what happened to it, the task after it, or a ``StateConflict`` when the
event is not allowed in the task's state. No I/O and no clock: the time of the event is
passed in. The engine applies it, then persists and publishes what it returns.

    submitted ─┬─> working <──────> input-required
               │      │                   │
               └──────┴───────────────────┴──> completed | failed | canceled | rejected

A terminal task never changes again (a result that arrives after a cancel is refused
here, and the engine drops it). Input is taken only by a task waiting for it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from internal.protocol.a2a.model import (
    Artifact,
    Budget,
    CostNode,
    Message,
    Part,
    PeerTask,
    StateConflict,
    StatusEntry,
    Task,
    TaskError,
    TaskState,
)


@dataclass(frozen=True, slots=True)
class Started:
    """The run began (or, with a message, reports progress): ``working``."""

    message: str | None = None


@dataclass(frozen=True, slots=True)
class InputRequested:
    """The run waits on its caller: for input, or (``auth``) for an authorisation."""

    prompt: str
    auth: bool = False
    asked_by: str = ""  # a peer's question relayed: the agent that asked it


@dataclass(frozen=True, slots=True)
class InputReceived:
    """The caller answered a task waiting in ``input-required``."""

    message: Message | None = None


@dataclass(frozen=True, slots=True)
class PeerTaskKnown:
    """The delegation's peer task is known (its id, context, binding): kept with the task
    so a caller's answer and a restart find it. Not a change of state."""

    peer_task: PeerTask


@dataclass(frozen=True, slots=True)
class ArtifactAdded:
    """A new artifact, or (``append``) more parts of the one with the same id."""

    artifact: Artifact
    append: bool = False
    last_chunk: bool = True


@dataclass(frozen=True, slots=True)
class Canceled:
    by: str


@dataclass(frozen=True, slots=True)
class Finished:
    """The run ended (or was cut off): a terminal state with what it produced."""

    state: TaskState
    error: TaskError | None = None
    message: str | None = None
    parts: tuple[Part, ...] | None = None
    artifacts: tuple[Artifact, ...] | None = None
    budget: Budget | None = None
    cost: CostNode | None = None
    receipts: tuple[str, ...] | None = None  # the receipts of the tasks it delegated
    as_message: bool = False  # the skill answers with a message, not a task

    def __post_init__(self) -> None:
        if not self.state.terminal:
            raise ValueError(f"Finished needs a terminal state, not {self.state.value}")


def created(at: str, *, running: bool, **fields: Any) -> Task:
    """A new task at ``at``: submitted, or (``running``) submitted and at once working,
    the task ``apply(created(at, running=False, ...), Started(), at)`` is, made without
    that copy (a whole task's worth of frozen fields): a task whose run starts right
    away is recorded working in its first write."""
    history: tuple[StatusEntry, ...] = (StatusEntry(TaskState.SUBMITTED, at),)
    if running:
        history += (StatusEntry(TaskState.WORKING, at, ""),)
    return Task(state=TaskState.WORKING if running else TaskState.SUBMITTED, created_at=at,
                updated_at=at, history=history, **fields)


def failed(code: str, message: str, state: TaskState = TaskState.FAILED) -> Finished:
    return Finished(state, error=TaskError(code, message), message=message)


Event = (Started | InputRequested | InputReceived | ArtifactAdded | Canceled | Finished
         | PeerTaskKnown)


def apply(task: Task, event: Event, at: str) -> Task:
    """The task after ``event`` at ``at``; the same object when nothing changes."""
    if task.state.terminal:
        if isinstance(event, Canceled):
            raise StateConflict("task_not_cancelable",
                                f"task {task.id} is already {task.state.value}")
        raise StateConflict("task_terminal", f"task {task.id} is {task.state.value}")
    match event:
        case Started(message=None) if task.state is TaskState.WORKING:
            return task  # nothing to record
        case Started(message=message):
            return _move(task, TaskState.WORKING, message, at)
        case InputRequested(prompt=prompt, auth=auth, asked_by=asked_by):
            waiting = TaskState.AUTH_REQUIRED if auth else TaskState.INPUT_REQUIRED
            return _move(task, waiting, prompt, at, asked_by=asked_by)
        case PeerTaskKnown(peer_task=peer_task):
            return task if task.peer_task == peer_task else replace(
                task, peer_task=peer_task, updated_at=at)
        case InputReceived(message=message):
            if not task.state.interrupted:
                raise StateConflict("task_not_waiting", f"task {task.id} is "
                                    f"{task.state.value}, not waiting for input")
            changes = {} if message is None else {"messages": (
                *task.messages,
                replace(message, task_id=task.id, context_id=task.context_id, at=at))}
            return _move(task, TaskState.WORKING, "input received", at, **changes)
        case ArtifactAdded(artifact=artifact, append=True) if any(
                a.artifact_id == artifact.artifact_id for a in task.artifacts):
            grown = tuple(replace(a, parts=a.parts + artifact.parts)
                          if a.artifact_id == artifact.artifact_id else a
                          for a in task.artifacts)
            return replace(task, artifacts=grown, updated_at=at)
        case ArtifactAdded(artifact=artifact):
            return replace(task, artifacts=(*task.artifacts, artifact), updated_at=at)
        case Canceled(by=by):
            return _move(task, TaskState.CANCELED, f"canceled by {by}", at)
        case Finished():
            return _finish(task, event, at)


def _finish(task: Task, event: Finished, at: str) -> Task:
    # What the event leaves as None keeps the task's own.
    changes: dict[str, Any] = {"reply_as_message": True} if event.as_message else {}
    if event.error is not None:
        changes["error"] = event.error
    if event.parts is not None:
        changes["parts"] = event.parts
    if event.artifacts is not None:
        changes["artifacts"] = event.artifacts
    if event.budget is not None:
        changes["budget"] = event.budget
    if event.cost is not None:
        changes["cost"] = event.cost
    if event.receipts is not None:
        changes["receipts"] = event.receipts
    return _move(task, event.state, event.message, at, **changes)


def _move(task: Task, state: TaskState, message: str | None, at: str, **changes: Any) -> Task:
    if task.asked_by and "asked_by" not in changes:
        changes["asked_by"] = ""  # the question it waited on is answered, or moot
    if state is not task.state or message is not None:
        changes["history"] = (*task.history, StatusEntry(state, at, message or ""))
        # A new state without a message clears the old one, as its history entry does.
        changes["status_message"] = message or ""
    return replace(task, updated_at=at, state=state, **changes)


def interrupted(task: Task, code: str, message: str, at: str) -> Task:
    """A task cut off before its run could end it (a restart, a failed first write):
    failed, with a budget even if it never had one."""
    return replace(apply(task, failed(code, message), at),
                   budget=task.budget or Budget(Decimal("0")))
