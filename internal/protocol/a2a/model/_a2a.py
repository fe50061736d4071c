"""What the A2A bindings add to the task model, independent of the wire version.

A Butler task maps onto an A2A task like this (docs/protocol.md):

- ``artifacts``: the artifacts the skill emitted, then one ``<task id>-result`` artifact
  holding the result parts;
- ``status.message``: an agent message with the latest status text (a question, a
  progress note, why it failed), when there is one;
- ``history``: the caller's messages and the earlier status texts, oldest first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from internal.protocol.a2a.model._task import Artifact, Message, Part, PushConfig, Task, TaskState

JSONRPC_PATH = "/a2a/jsonrpc"
WELL_KNOWN_CARD_PATH = "/.well-known/agent-card.json"
LEGACY_CARD_PATH = "/.well-known/agent.json"  # before A2A 0.3
PROTOCOL_VERSION = "1.0"
LEGACY_VERSION = "0.3"
MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 50


@dataclass(frozen=True, slots=True)
class SendParams:
    """A ``SendMessage`` / ``message/send`` request, decoded."""

    message: Message
    return_immediately: bool = False
    history_length: int | None = None
    push: PushConfig | None = None
    accepted_output_modes: tuple[str, ...] = ()
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ListQuery:
    """A ``ListTasks`` request, decoded."""

    context_id: str | None = None
    state: TaskState | None = None
    page_size: int = DEFAULT_PAGE_SIZE
    page_token: str | None = None
    history_length: int | None = None
    updated_after: str | None = None
    include_artifacts: bool = False


@dataclass(frozen=True, slots=True)
class SkillInfo:
    id: str
    name: str
    description: str
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    input_modes: tuple[str, ...] = ()  # empty: the card's defaults
    output_modes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ExtensionInfo:
    uri: str
    description: str
    required: bool = False
    params: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class CardInfo:
    """Everything an A2A agent card says, built per request from live state."""

    name: str
    description: str
    version: str
    base_url: str
    skills: tuple[SkillInfo, ...]
    streaming: bool = True
    push_notifications: bool = True
    extensions: tuple[ExtensionInfo, ...] = ()
    legacy_v03: bool = False
    input_modes: tuple[str, ...] = ("text/plain", "application/json")
    output_modes: tuple[str, ...] = ("text/plain", "application/json")
    grpc_url: str | None = None  # host:port of the gRPC binding, when it is served
    # The encoded 1.0 card to the same card signed (``codec.card_signature.card_signer``).
    sign: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    @property
    def jsonrpc_url(self) -> str:
        return self.base_url + JSONRPC_PATH

    @property
    def rest_url(self) -> str:
        return self.base_url


def result_artifact(task: Task) -> Artifact | None:
    if not task.parts:
        return None
    return Artifact(artifact_id=f"{task.id}-result", parts=task.parts, name="result")


def task_artifacts(task: Task) -> tuple[Artifact, ...]:
    result = result_artifact(task)
    return task.artifacts + ((result,) if result is not None else ())


def status_message(task: Task) -> Message | None:
    """The agent message of the current status, if the status has text."""
    if not task.status_message:
        return None
    return Message(message_id=f"{task.id}-s{len(task.history)}", role="agent",
                   parts=(Part(text=task.status_message),), context_id=task.context_id,
                   task_id=task.id, at=task.updated_at)


def caller_messages(task: Task) -> tuple[Message, ...]:
    """The caller's messages; for a task submitted over /v2, one made from its request."""
    if task.messages:
        return task.messages
    parts = task.request.as_parts
    if not parts:
        return ()
    return (Message(message_id=f"{task.id}-m0", role="user", parts=parts,
                    context_id=task.context_id, task_id=task.id, at=task.created_at),)


def history(task: Task) -> tuple[Message, ...]:
    """The caller's messages and every earlier status text of the agent, oldest first."""
    agent = [
        Message(message_id=f"{task.id}-s{i + 1}", role="agent", parts=(Part(text=entry.message),),
                context_id=task.context_id, task_id=task.id, at=entry.at)
        for i, entry in enumerate(task.history[:-1]) if entry.message
    ]
    caller = caller_messages(task)
    if not agent and len(caller) < 2:  # most tasks: nothing to merge or order
        return caller
    return tuple(sorted([*caller, *agent], key=_at))


def _at(message: Message) -> str:
    return message.at


def trim_history(messages: tuple[Message, ...], length: int | None) -> tuple[Message, ...]:
    """``historyLength``: unset is everything, 0 is nothing, n the n most recent."""
    if length is None:
        return messages
    return messages[-length:] if length > 0 else ()


def reply_message(task: Task) -> Message | None:
    """The message a skill answered with instead of a task (A2A allows either), or None.
    It carries the context id but no task id: for the caller there is no task."""
    if not (task.reply_as_message and task.state is TaskState.COMPLETED):
        return None
    return Message(message_id=f"{task.id}-reply", role="agent", parts=task.parts,
                   context_id=task.context_id)


def interrupted_or_terminal(state: TaskState) -> bool:
    return state.terminal or state.interrupted


VERSION_HEADER = "A2A-Version"


def requested_version(headers: Mapping[str, str]) -> str:
    """The ``A2A-Version`` a request asks for; none (or empty) means 0.3."""
    return headers.get(VERSION_HEADER, "").strip() or LEGACY_VERSION


def version_matches(requested: str, supported: str) -> bool:
    """Major and minor must match; a patch level ("1.0.1") does not matter."""
    try:
        asked = [int(p) for p in requested.split(".")]
        have = [int(p) for p in supported.split(".")]
    except ValueError:
        return False
    return 2 <= len(asked) <= 3 and asked[:2] == have[:2]


def message_fields(message: Message) -> dict[str, Any]:
    """The optional fields of a message, spelled the same in A2A 0.3 and 1.0."""
    out: dict[str, Any] = {}
    if message.context_id:
        out["contextId"] = message.context_id
    if message.task_id:
        out["taskId"] = message.task_id
    if message.metadata:
        out["metadata"] = message.metadata
    if message.extensions:
        out["extensions"] = list(message.extensions)
    if message.reference_task_ids:
        out["referenceTaskIds"] = list(message.reference_task_ids)
    return out
