"""Reading another agent's A2A answers (1.0 or 0.3) into the task model, leniently:
unknown fields are ignored, but a missing or unknown state is an error.

A standard agent's task becomes a Butler task whose result parts are the parts of its
artifacts (or, with none, of its status message), in order.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from internal.protocol.a2a.codec.swarm_envelope import SWARM_EXTENSION_URI
from internal.protocol.a2a.model import (
    BUTLER_DOMAIN,
    ERROR_TABLE,
    PROTOCOL_VERSION,
    Artifact,
    ButlerError,
    DelegationFailed,
    Part,
    Task,
    TaskError,
    TaskRequest,
    TaskState,
    error_from_code,
)

_V1_STATES = {
    "TASK_STATE_SUBMITTED": TaskState.SUBMITTED, "TASK_STATE_WORKING": TaskState.WORKING,
    "TASK_STATE_COMPLETED": TaskState.COMPLETED, "TASK_STATE_FAILED": TaskState.FAILED,
    "TASK_STATE_CANCELED": TaskState.CANCELED, "TASK_STATE_CANCELLED": TaskState.CANCELED,
    "TASK_STATE_INPUT_REQUIRED": TaskState.INPUT_REQUIRED,
    "TASK_STATE_REJECTED": TaskState.REJECTED, "TASK_STATE_AUTH_REQUIRED": TaskState.AUTH_REQUIRED,
}


def bad_answer(peer: str, what: str) -> DelegationFailed:
    return DelegationFailed("peer_error", f"{peer} sent an invalid A2A answer: {what}")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def decode_part(raw: Any) -> Part | None:
    item = _dict(raw)
    meta = item.get("metadata") if isinstance(item.get("metadata"), dict) else None
    kind = item.get("kind")
    if isinstance(item.get("text"), str):
        return Part(text=item["text"], metadata=meta)
    if "data" in item and kind in (None, "data"):
        data = item["data"]
        return Part(data=data if isinstance(data, dict) else {"value": data}, metadata=meta)
    file = _dict(item.get("file")) if kind == "file" else {}
    if isinstance(item.get("url"), str):
        file = {"uri": item["url"]}
    elif isinstance(item.get("raw"), str):
        file = {"bytes": item["raw"]}
    if not file:
        return None
    for src, dst in (("mediaType", "mimeType"), ("filename", "name")):
        if isinstance(item.get(src), str):
            file[dst] = item[src]
    return Part(file=file, metadata=meta)


def decode_parts(raw: Any) -> tuple[Part, ...]:
    parts = (decode_part(p) for p in raw) if isinstance(raw, list) else ()
    return tuple(p for p in parts if p is not None)


def decode_state(raw: Any, version: str, peer: str) -> TaskState:
    if version == PROTOCOL_VERSION:
        state = _V1_STATES.get(raw) if isinstance(raw, str) else None
    else:
        state = TaskState(raw) if raw in TaskState.__members__.values() else None
    if state is None:
        raise bad_answer(peer, f"unknown task state {raw!r}")
    return state


def decode_task(raw: Any, version: str, peer: str) -> Task:
    data = _dict(raw)
    status = _dict(data.get("status"))
    if not isinstance(data.get("id"), str) or not data["id"]:
        raise bad_answer(peer, "a task without an id")
    state = decode_state(status.get("state"), version, peer)
    message = _dict(status.get("message"))
    note = "\n".join(p.text for p in decode_parts(message.get("parts")) if p.text is not None)
    artifacts = data.get("artifacts")
    parts = tuple(p for a in artifacts for p in decode_parts(_dict(a).get("parts"))) \
        if isinstance(artifacts, list) else ()
    if not parts and state is TaskState.COMPLETED:
        parts = decode_parts(message.get("parts"))
    error = None
    if state in (TaskState.FAILED, TaskState.REJECTED):
        # The peer's own words: whoever reports the failure names the peer, once.
        error = TaskError("peer_error" if state is TaskState.FAILED else "rejected",
                          note or state.value)
    return Task(
        id=data["id"], context_id=str(data.get("contextId", "")), owner="", state=state,
        request=TaskRequest(), created_at="", updated_at=str(status.get("timestamp", "")),
        parts=parts, error=error, status_message=note, receipts=_receipts(data),
        asked_by=asked_by(data),
    )


def _receipts(task: dict[str, Any]) -> tuple[str, ...]:
    """A Butler peer's signed receipts, under its swarm extension in the task's metadata;
    kept as they came (``butler receipt verify`` judges them)."""
    found = _dict(_dict(task.get("metadata")).get(SWARM_EXTENSION_URI)).get("receipts")
    if not isinstance(found, list):
        return ()
    return tuple(r for r in found[:1000] if isinstance(r, str))


def asked_by(task_or_update: dict[str, Any]) -> str:
    """The agent a Butler peer names as the one that asked its question (a relayed
    ``input-required``); "" when the peer asked it itself, or is not a Butler."""
    found = _dict(_dict(task_or_update.get("metadata")).get(SWARM_EXTENSION_URI)).get("askedBy")
    return found[:256] if isinstance(found, str) else ""


def message_task(raw: Any, peer: str) -> Task:
    """A message-only reply: a completed task carrying the message's parts."""
    data = _dict(raw)
    return Task(
        id=str(data.get("taskId") or data.get("messageId") or ""),
        context_id=str(data.get("contextId", "")), owner="", state=TaskState.COMPLETED,
        request=TaskRequest(), created_at="", updated_at="",
        parts=decode_parts(data.get("parts")),
    )


def apply_event(task: Task | None, result: Any, version: str, peer: str) -> Task:
    """Fold one stream event (1.0 ``StreamResponse`` or 0.3 ``kind``-tagged) into ``task``."""
    data = _dict(result)
    if version == PROTOCOL_VERSION:
        if "task" in data:
            return decode_task(data["task"], version, peer)
        if "message" in data:
            return message_task(data["message"], peer)
        update = _dict(data.get("statusUpdate") or data.get("artifactUpdate"))
        kind = "status-update" if "statusUpdate" in data else "artifact-update"
    else:
        kind = str(data.get("kind", ""))
        if kind == "task":
            return decode_task(data, version, peer)
        if kind == "message":
            return message_task(data, peer)
        update = data
    if task is None:
        # A2A 0.3 lets a stream begin with an update (the 0.3 SDK's TaskUpdater pattern
        # does): the task is known from the update's ids.
        task_id = update.get("taskId")
        if not isinstance(task_id, str) or not task_id:
            raise bad_answer(peer, "a stream that begins with an update without a taskId")
        task = Task(id=task_id, context_id=str(update.get("contextId", "")), owner="",
                    state=TaskState.SUBMITTED, request=TaskRequest(), created_at="",
                    updated_at="")
    if kind == "artifact-update":
        added = decode_parts(_dict(update.get("artifact")).get("parts"))
        return replace(task, parts=task.parts + added)
    if kind == "status-update":
        status = _dict(update.get("status"))
        state = decode_state(status.get("state"), version, peer)
        note = "\n".join(p.text for p in decode_parts(_dict(status.get("message")).get("parts"))
                         if p.text is not None)
        error = None
        if state in (TaskState.FAILED, TaskState.REJECTED):
            error = TaskError("peer_error" if state is TaskState.FAILED else "rejected",
                              note or state.value)
        parts = task.parts
        if not parts and state is TaskState.COMPLETED:
            parts = decode_parts(_dict(status.get("message")).get("parts"))
        return replace(task, state=state, status_message=note, error=error, parts=parts,
                       receipts=_receipts(update) or task.receipts,
                       asked_by=asked_by(update))
    raise bad_answer(peer, f"an unknown stream event {sorted(data)!r}")


def artifact_update(result: Any, version: str) -> tuple[Artifact, bool, bool] | None:
    """A stream event's artifact chunk as it came: (the artifact with this chunk's parts,
    append, last chunk); None for any other event."""
    data = _dict(result)
    if version == PROTOCOL_VERSION:
        update = _dict(data.get("artifactUpdate"))
    else:
        update = data if data.get("kind") == "artifact-update" else {}
    raw = _dict(update.get("artifact"))
    if not raw:
        return None
    source = _dict(_dict(raw.get("metadata")).get(SWARM_EXTENSION_URI)).get("source")
    artifact = Artifact(artifact_id=str(raw.get("artifactId", ""))[:256],
                        parts=decode_parts(raw.get("parts")),
                        name=str(raw.get("name", "") or "")[:256],
                        description=str(raw.get("description", "") or "")[:1024],
                        source=source[:256] if isinstance(source, str) else "")
    return artifact, update.get("append") is True, update.get("lastChunk") is not False


def peer_error(peer: str, error: Any) -> ButlerError:
    """A JSON-RPC error object, HTTP+JSON error body or gRPC status (``{code, message,
    details}``) from ``peer``, as an exception: a Butler's refusal keeps its class."""
    err = error if isinstance(error, dict) else {}
    message = str(err.get("message", "error"))
    data = err.get("data", err.get("details"))
    code = None
    for info in data if isinstance(data, list) else [data]:
        if not isinstance(info, dict) or info.get("domain", BUTLER_DOMAIN) != BUTLER_DOMAIN:
            continue
        meta = _dict(info.get("metadata")) or info  # 1.0 ErrorInfo, or Butler's 0.3 data
        if isinstance(meta.get("code"), str) and meta["code"] in ERROR_TABLE:
            code = meta["code"]
    if code is not None and ERROR_TABLE[code].category == "refusal":
        return error_from_code(code, f"{peer}: {message}")
    return DelegationFailed("peer_error", f"{peer} answered A2A error {err.get('code')}: "
                                          f"{message}")
