"""A task as it goes to a peer (``Outgoing``: the request and its swarm envelope), and as
each A2A wire version (1.0, 0.3) encodes it and brings it back: what the JSON-RPC,
HTTP+JSON and gRPC transports share."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from internal.protocol.a2a.codec import a2a_v03, a2a_v1, swarm_envelope
from internal.protocol.a2a.codec.peer_answers import decode_task, message_task
from internal.protocol.a2a.codec.swarm_envelope import TRACE_HEADER, TREE_HEADER
from internal.protocol.a2a.model import (
    PROTOCOL_VERSION,
    VERSION_HEADER,
    Artifact,
    Part,
    PeerTask,
    Task,
    TaskRequest,
)


@dataclass(frozen=True)
class Outgoing:
    """``headers``: the call's own (trace context, ``TRACE_HEADER``, ``TREE_HEADER``).
    ``task_id``/``context_id``: the peer's task this message answers (a follow-up turn of
    a task waiting on its caller), "" for a new task."""

    request: TaskRequest
    chain: tuple[str, ...] = ()
    budget: Decimal | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    task_id: str = ""
    context_id: str = ""
    # Answered at once (A2A ``returnImmediately``), the task then read back every poll
    # interval: how a peer that does not stream has its progress relayed.
    return_immediately: bool = False


@dataclass(frozen=True)
class PeerUpdate:
    """What a delegation learns of its peer's task as it goes: the task as known so far
    (``ref``: where it is), and an artifact chunk when that is what just came."""

    ref: PeerTask
    task: Task
    artifact: Artifact | None = None
    append: bool = False
    last_chunk: bool = True
    # False: known before the peer answered anything (a Butler's task, sent under our id).
    reported: bool = True


# Told of the peer's task once its id is known, then of each change (docs/delegation.md).
PeerWatch = Callable[[PeerUpdate], Awaitable[None]]


@dataclass(frozen=True)
class PeerTracking:
    """A delegation that follows its peer's task as it goes (a task's own delegation):
    ``watch`` is told of the peer's task once its id is known and of each change seen.
    ``followed``: whether someone follows the delegating task's progress now (a caller
    streams it); ``until_followed`` returns once someone does. A peer that answers in one
    go is also read while it works only then: nobody else would see its progress."""

    watch: PeerWatch
    followed: Callable[[], bool]
    until_followed: Callable[[], Awaitable[None]]


def a2a_headers(message: Outgoing, version: str) -> dict[str, str]:
    return {VERSION_HEADER: version,
            **swarm_envelope.envelope_headers(message.chain, message.budget),
            **message.headers}


def a2a_params(message: Outgoing, version: str) -> dict[str, Any]:
    """``SendMessage``'s params (``message/send``'s in 0.3), the envelope in the metadata."""
    parts = message.request.as_parts
    envelope = swarm_envelope.encode_envelope(message.chain, message.budget,
                                               message.headers.get(TRACE_HEADER),
                                               message.headers.get(TREE_HEADER))
    metadata = {swarm_envelope.SWARM_EXTENSION_URI: envelope}
    message_id = uuid.uuid4().hex
    ids = {key: value for key, value in (("taskId", message.task_id),
                                         ("contextId", message.context_id)) if value}
    if version == PROTOCOL_VERSION:
        sent = {"messageId": message_id, "role": "ROLE_USER",
                "parts": [a2a_v1.encode_part(p) for p in parts or (Part(text=""),)],
                "metadata": metadata, **ids}
        return {"message": sent,
                "configuration": {"returnImmediately": message.return_immediately}}
    sent = {"kind": "message", "messageId": message_id, "role": "user",
            "parts": [a2a_v03.encode_part(p) for p in parts or (Part(text=""),)],
            "metadata": metadata, **ids}
    return {"message": sent, "configuration": {"blocking": not message.return_immediately}}


def task_of(result: Any, version: str, peer: str) -> Task:
    """A ``SendMessage`` or ``GetTask`` result (a task, or a message-only reply)."""
    if version == PROTOCOL_VERSION:
        if isinstance(result, dict) and "message" in result:
            return message_task(result["message"], peer)
        if isinstance(result, dict) and "task" in result:
            result = result["task"]
        return decode_task(result, version, peer)
    if isinstance(result, dict) and result.get("kind") == "message":
        return message_task(result, peer)
    return decode_task(result, version, peer)
