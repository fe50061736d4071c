"""Protocol value types: frozen dataclasses shared by every binding and the engine.

Wire shapes live in the codecs (``codec.butler_v2`` for Butler's /v2 REST); these types
know nothing of JSON field names.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any


class TaskState(enum.StrEnum):
    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input-required"
    AUTH_REQUIRED = "auth-required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    REJECTED = "rejected"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def interrupted(self) -> bool:
        """Waiting on the caller: blocking calls return here too."""
        return self in (TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED)


_TERMINAL = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
)


@dataclass(frozen=True, slots=True)
class Part:
    """One piece of content: exactly one of text, data or file is set."""

    text: str | None = None
    data: dict[str, Any] | None = None
    file: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None

    @property
    def kind(self) -> str:
        if self.text is not None:
            return "text"
        return "data" if self.data is not None else "file"

    @property
    def media_type(self) -> str:
        """What a skill's ``input_modes`` are matched against."""
        if self.text is not None:
            return "text/plain"
        if self.data is not None:
            return "application/json"
        file = self.file or {}
        media = file.get("mimeType") or file.get("mediaType") or file.get("media_type")
        return str(media) if media else "application/octet-stream"


def media_type_matches(media_type: str, accepted: str) -> bool:
    """``accepted`` may be ``*/*`` or ``type/*``; parameters (``;charset=...``) are ignored."""
    kind, _, sub = media_type.split(";", 1)[0].strip().lower().partition("/")
    want_kind, _, want_sub = accepted.split(";", 1)[0].strip().lower().partition("/")
    return want_kind in ("*", kind) and want_sub in ("*", sub)


@dataclass(frozen=True, slots=True)
class Artifact:
    artifact_id: str
    parts: tuple[Part, ...]
    name: str = ""
    description: str = ""
    # Relayed from down the delegation path as it came: the agent that made it.
    source: str = ""


@dataclass(frozen=True, slots=True)
class StatusEntry:
    state: TaskState
    at: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class TaskError:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class CostNode:
    """One hop of a delegation tree: what it cost and what its own delegations cost."""

    agent: str
    skill: str
    cost_usd: Decimal
    duration_ms: int
    status: str
    children: tuple[CostNode, ...] = ()

    @property
    def total_usd(self) -> Decimal:
        if not self.children:  # every leaf of every tree, each time a task is encoded
            return self.cost_usd + _ZERO
        return self.cost_usd + sum((c.total_usd for c in self.children), _ZERO)


_ZERO = Decimal("0")


@dataclass(frozen=True, slots=True)
class Envelope:
    """The swarm envelope as received: chain oldest first, not including the receiver."""

    chain: tuple[str, ...] = ()
    budget_usd: Decimal | None = None
    trace_id: str | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    # The delegation tree this task belongs to, named by the agent where it began: the
    # key (with the authenticated caller) of the tree's shared workspace at each hop.
    tree_id: str | None = None


@dataclass(frozen=True, slots=True)
class Message:
    """An A2A message: the caller's (role ``user``) or this agent's (``agent``).

    ``at`` is when it arrived; the A2A bindings order a task's history by it.
    """

    message_id: str
    role: str
    parts: tuple[Part, ...]
    context_id: str = ""
    task_id: str = ""
    metadata: dict[str, Any] | None = None
    extensions: tuple[str, ...] = ()
    reference_task_ids: tuple[str, ...] = ()
    at: str = ""


@dataclass(frozen=True, slots=True)
class TaskRequest:
    text: str = ""
    id: str | None = None
    context_id: str | None = None
    input: dict[str, Any] = field(default_factory=dict)
    parts: tuple[Part, ...] = ()
    capabilities_needed: tuple[str, ...] = ()
    skill: str | None = None
    blocking: bool = True
    timeout_seconds: float | None = None
    message: Message | None = None  # the A2A message this request came from, if any

    @property
    def as_parts(self) -> tuple[Part, ...]:
        """The request as one message's parts: its text, its input as data, its parts."""
        text = (Part(text=self.text),) if self.text else ()
        data = (Part(data=dict(self.input)),) if self.input else ()
        return (*text, *data, *self.parts)


@dataclass(frozen=True, slots=True)
class Budget:
    start_usd: Decimal
    spent_usd: Decimal = Decimal("0")

    @property
    def left_usd(self) -> Decimal:
        return self.start_usd - self.spent_usd


@dataclass(frozen=True, slots=True)
class PeerTask:
    """The peer's task a delegation's work is in, as the delegating agent follows it: a
    caller's answer goes there, and a restart re-attaches to it (docs/delegation.md)."""

    peer: str  # the peer entry's name
    task_id: str
    context_id: str = ""
    binding: str = ""  # "butler" (/v2), or the A2A binding: JSONRPC, HTTP+JSON, GRPC
    version: str = ""  # the A2A protocol version of that binding
    url: str = ""  # the interface it was sent to
    tree_id: str = ""  # the delegation tree it belongs to (sent again with each turn)


@dataclass(frozen=True, slots=True)
class Task:
    id: str
    context_id: str
    owner: str
    state: TaskState
    request: TaskRequest
    created_at: str
    updated_at: str
    skill: str = ""
    history: tuple[StatusEntry, ...] = ()
    parts: tuple[Part, ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    error: TaskError | None = None
    status_message: str = ""
    budget: Budget | None = None
    cost: CostNode | None = None
    chain: tuple[str, ...] = ()
    trace_id: str = ""
    messages: tuple[Message, ...] = ()  # the caller's A2A messages, oldest first
    # The skill answered with a message, not a task: A2A bindings send that message.
    reply_as_message: bool = False
    # Signed receipts (compact JWS): this agent's own first, then its delegations' (the
    # whole tree below it), once the task has ended.
    receipts: tuple[str, ...] = ()
    # The task waits (input- or auth-required) on a question this agent relays: the
    # agent down the delegation path that asked it ("": its own skill asked).
    asked_by: str = ""
    # A delegated task's peer task, once known: follow-ups and re-attachment go there.
    peer_task: PeerTask | None = None

    @property
    def wire_id(self) -> str:
        """The id its caller knows it by: ``id`` without a scope (``scoped_task_id``)."""
        return wire_task_id(self.id)


SCOPE_MARK = "~"  # never in an id a caller may choose


def wire_task_id(task_id: str) -> str:
    """The id a caller knows a stored task id by (``scoped_task_id``)."""
    return task_id.partition(SCOPE_MARK)[0]


def scoped_task_id(task_id: str, owner: str) -> str:
    """Where a caller's chosen id is kept when another caller's task already has it."""
    return f"{task_id}{SCOPE_MARK}{hashlib.sha256(owner.encode()).hexdigest()[:16]}"


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """A change seen by subscribers: a new status, or a new artifact."""

    task: Task
    # "status" | "artifact"; A2A streams also use "task" (their first event) and
    # "message" (a message reply, the whole stream)
    kind: str
    artifact: Artifact | None = None
    # An artifact sent in chunks: ``append`` adds these parts to the artifact of the same
    # id; ``last_chunk`` says no more will come.
    append: bool = False
    last_chunk: bool = True

    @property
    def final(self) -> bool:
        return self.kind == "status" and self.task.state.terminal


@dataclass(frozen=True, slots=True)
class TaskPage:
    tasks: tuple[Task, ...]
    next_cursor: str | None
    total: int | None = None  # how many tasks match the filters, when the store counted them


@dataclass(frozen=True, slots=True)
class PushConfig:
    """Where to send a task's status updates (A2A push notifications)."""

    id: str
    task_id: str
    url: str
    token: str = field(default="", repr=False)
    auth_scheme: str = ""
    auth_credentials: str = field(default="", repr=False)
    wire: str = "1.0"  # the protocol version whose payload shape the webhook receives
