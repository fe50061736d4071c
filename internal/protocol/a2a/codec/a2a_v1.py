"""A2A 1.0 wire format (proto3 JSON of ``lf.a2a.v1``): decode requests, encode answers.

Shared by the 1.0 JSON-RPC and HTTP+JSON bindings; fields are lowerCamelCase, enums
are names like ``TASK_STATE_COMPLETED`` and ``ROLE_USER``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from internal.protocol.a2a.codec import butler_v2, exact_json, proto3
from internal.protocol.a2a.codec.swarm_envelope import SWARM_EXTENSION_URI
from internal.protocol.a2a.model import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    Artifact,
    ButlerError,
    CostNode,
    ListQuery,
    Message,
    Part,
    PushConfig,
    SendParams,
    Task,
    TaskEvent,
    TaskPage,
    TaskState,
    history,
    message_fields,
    reply_message,
    status_message,
    task_artifacts,
    trim_history,
    wire_task_id,
)

STATE_NAMES = {
    TaskState.SUBMITTED: "TASK_STATE_SUBMITTED",
    TaskState.WORKING: "TASK_STATE_WORKING",
    TaskState.COMPLETED: "TASK_STATE_COMPLETED",
    TaskState.FAILED: "TASK_STATE_FAILED",
    TaskState.CANCELED: "TASK_STATE_CANCELED",
    TaskState.INPUT_REQUIRED: "TASK_STATE_INPUT_REQUIRED",
    TaskState.REJECTED: "TASK_STATE_REJECTED",
    TaskState.AUTH_REQUIRED: "TASK_STATE_AUTH_REQUIRED",
}
STATE_NUMBERS = {
    TaskState.SUBMITTED: 1, TaskState.WORKING: 2, TaskState.COMPLETED: 3, TaskState.FAILED: 4,
    TaskState.CANCELED: 5, TaskState.INPUT_REQUIRED: 6, TaskState.REJECTED: 7,
    TaskState.AUTH_REQUIRED: 8,
}
_STATE_BY_NAME = {name: state for state, name in STATE_NAMES.items()}
_STATE_BY_NUMBER = {number: state for state, number in STATE_NUMBERS.items()}
_ROLES = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}
_ROLE_NUMBERS = {1: "user", 2: "agent"}
MAX_PARTS = 256
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"

# --- decoding requests -----------------------------------------------------------


def decode_part(raw: Any, where: str) -> Part:
    if type(raw) is dict and len(raw) == 1:  # the common part, {"text": ...}, read at once
        text = raw.get("text")
        if type(text) is str and len(text) <= butler_v2.MAX_TEXT:
            return Part(text=text)
    return _decode_part(raw, where)


def _decode_part(raw: Any, where: str) -> Part:
    item = proto3.obj(raw, where)
    meta = proto3.metadata(item, where)
    content = [k for k in ("text", "raw", "url", "data") if proto3.get(item, k) is not None]
    if len(content) != 1:
        raise proto3.bad(f"{where} needs exactly one of text, raw, url or data")
    kind = content[0]
    if kind == "text":
        return Part(text=proto3.string(item, "text", where, max_len=butler_v2.MAX_TEXT),
                    metadata=meta)
    if kind == "data":
        data = proto3.get(item, "data")
        if not isinstance(data, dict):
            raise proto3.bad(f"{where}.data must be a JSON object here (docs/protocol.md)")
        return Part(data=data, metadata=meta)
    file: dict[str, Any] = {}
    if kind == "url":
        file["uri"] = proto3.string(item, "url", where, max_len=8192)
    else:
        file["bytes"] = proto3.base64_text(proto3.get(item, "raw"), f"{where}.raw")
    if media := proto3.string(item, "mediaType", where, max_len=255):
        file["mimeType"] = media
    if name := proto3.string(item, "filename", where, max_len=1024):
        file["name"] = name
    return Part(file=file, metadata=meta)


def decode_parts(raw: Any, where: str) -> tuple[Part, ...]:
    if not isinstance(raw, list) or not raw or len(raw) > MAX_PARTS:
        raise proto3.bad(f"{where} must be a list of 1 to {MAX_PARTS} parts")
    return tuple(decode_part(p, f"{where}[{i}]") for i, p in enumerate(raw))


# The message most clients send: read without the per-field helpers below, which give
# the same result for it (tests/test_wire_properties.py compares both).
_PLAIN_MESSAGE = frozenset({"messageId", "role", "parts", "contextId", "taskId"})


def decode_message(raw: Any, where: str = "message") -> Message:
    if type(raw) is dict and raw.keys() <= _PLAIN_MESSAGE and raw.get("role") == "ROLE_USER":
        message_id, context_id = raw.get("messageId"), raw.get("contextId", "")
        task_id = raw.get("taskId", "")
        if (type(message_id) is str and type(context_id) is str and type(task_id) is str
                and 0 < len(message_id) <= 256 and len(context_id) <= 256
                and len(task_id) <= 256):
            return Message(message_id=message_id, role="user",
                           parts=decode_parts(raw.get("parts"), f"{where}.parts"),
                           context_id=context_id, task_id=task_id)
    return _decode_message(raw, where)


def _decode_message(raw: Any, where: str) -> Message:
    data = proto3.obj(raw, where)
    role_raw = proto3.get(data, "role")
    if role_raw is None:
        raise proto3.bad(f"{where}.role is required")
    role = proto3.enum(role_raw, _ROLES, _ROLE_NUMBERS, f"{where}.role")
    if role != "user":
        raise proto3.bad(f"{where}.role must be ROLE_USER")
    return Message(
        message_id=proto3.string(data, "messageId", where, required=True, max_len=256),
        role=role,
        parts=decode_parts(proto3.get(data, "parts"), f"{where}.parts"),
        context_id=proto3.string(data, "contextId", where, max_len=256),
        task_id=proto3.string(data, "taskId", where, max_len=256),
        metadata=proto3.metadata(data, where),
        extensions=proto3.strings(data, "extensions", where),
        reference_task_ids=proto3.strings(data, "referenceTaskIds", where),
    )


def decode_push_config(raw: Any, where: str, *, task_id: str = "") -> PushConfig:
    data = proto3.obj(raw, where)
    auth = proto3.get(data, "authentication")
    scheme = credentials = ""
    if auth is not None:
        auth = proto3.obj(auth, f"{where}.authentication")
        scheme = proto3.string(auth, "scheme", f"{where}.authentication", required=True,
                             max_len=64)
        credentials = proto3.string(auth, "credentials", f"{where}.authentication", max_len=4096)
    return PushConfig(
        id=proto3.string(data, "id", where, max_len=128),
        task_id=task_id or proto3.string(data, "taskId", where, max_len=256),
        url=proto3.string(data, "url", where, required=True, max_len=2048),
        token=proto3.string(data, "token", where, max_len=4096),
        auth_scheme=scheme, auth_credentials=credentials,
    )


def decode_send_params(raw: Any) -> SendParams:
    params = proto3.obj(raw, "params")
    message = decode_message(proto3.get(params, "message"))
    config = proto3.get(params, "configuration")
    if config is None:
        return SendParams(message=message, metadata=proto3.metadata(params, "params"))
    config = proto3.obj(config, "configuration")
    push_raw = proto3.get(config, "taskPushNotificationConfig")
    return SendParams(
        message=message,
        return_immediately=bool(proto3.boolean(config, "returnImmediately", "configuration")),
        history_length=proto3.integer(config, "historyLength", "configuration"),
        push=None if push_raw is None else decode_push_config(
            push_raw, "configuration.taskPushNotificationConfig"),
        accepted_output_modes=proto3.strings(config, "acceptedOutputModes", "configuration"),
        metadata=proto3.metadata(params, "params"),
    )


def decode_state(raw: Any, where: str) -> TaskState:
    state: TaskState = proto3.enum(raw, _STATE_BY_NAME, _STATE_BY_NUMBER, where)
    return state


def decode_list_query(params: Mapping[str, Any]) -> ListQuery:
    state = proto3.get(params, "status")
    if isinstance(state, str) and re.fullmatch(r"[0-9]{1,3}", state):
        state = int(state)
    after = proto3.string(params, "statusTimestampAfter", "params", max_len=64)
    return ListQuery(
        context_id=proto3.string(params, "contextId", "params", max_len=256) or None,
        state=None if state in (None, "TASK_STATE_UNSPECIFIED", 0)
        else decode_state(state, "params.status"),
        page_size=proto3.integer(params, "pageSize", "params", minimum=1,
                               maximum=MAX_PAGE_SIZE) or DEFAULT_PAGE_SIZE,
        page_token=proto3.string(params, "pageToken", "params", max_len=1024) or None,
        history_length=proto3.integer(params, "historyLength", "params"),
        updated_after=rest_timestamp(after, "params.statusTimestampAfter") if after else None,
        include_artifacts=bool(proto3.boolean(params, "includeArtifacts", "params")),
    )


def rest_timestamp(value: str, where: str) -> str:
    """An RFC 3339 timestamp as the store writes them (UTC, microseconds, ``Z``)."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise proto3.bad(f"{where} must be an RFC 3339 timestamp") from None
    if parsed.tzinfo is None:
        raise proto3.bad(f"{where} needs a time zone (for example Z)")
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- encoding answers -----------------------------------------------------------


def encode_part(part: Part) -> dict[str, Any]:
    out: dict[str, Any]
    if part.text is not None:
        out = {"text": part.text}
    elif part.data is not None:
        out = {"data": part.data}
    else:
        file = part.file or {}
        uri = file.get("uri") or file.get("url")
        raw = file.get("bytes") or file.get("raw")
        out = {"url": str(uri)} if uri is not None else {"raw": str(raw or "")}
        media = file.get("mimeType") or file.get("mediaType") or file.get("media_type")
        name = file.get("name") or file.get("filename")
        if media:
            out["mediaType"] = str(media)
        if name:
            out["filename"] = str(name)
    if part.metadata:
        out["metadata"] = part.metadata
    return out


def encode_message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {
        "messageId": message.message_id,
        "role": "ROLE_AGENT" if message.role == "agent" else "ROLE_USER",
        "parts": [encode_part(p) for p in message.parts],
    }
    out.update(message_fields(message))
    return out


def encode_artifact(artifact: Artifact,
                    part_encoder: Callable[[Part], dict[str, Any]] | None = None
                    ) -> dict[str, Any]:
    """The artifact's fields; 0.3 shares them, with its own ``part_encoder``."""
    encode = part_encoder or encode_part
    out: dict[str, Any] = {"artifactId": artifact.artifact_id,
                           "parts": [encode(p) for p in artifact.parts]}
    if artifact.name:
        out["name"] = artifact.name
    if artifact.description:
        out["description"] = artifact.description
    if artifact.source:
        out["metadata"] = {SWARM_EXTENSION_URI: {"source": artifact.source}}
    return out


def encode_status(task: Task, state: str | None = None,
                  message_encoder: Callable[[Message], dict[str, Any]] | None = None
                  ) -> dict[str, Any]:
    """The status's fields; 0.3 shares them, with its own state name and ``message_encoder``."""
    out: dict[str, Any] = {"state": state or STATE_NAMES[task.state],
                           "timestamp": task.updated_at}
    message = status_message(task)
    if message is not None:
        out["message"] = (message_encoder or encode_message)(message)
    return out


def butler_metadata(task: Task) -> dict[str, Any]:
    """What Butler adds to a task, under its swarm extension URI."""
    out: dict[str, Any] = {
        "skill": task.skill,
        "callerChain": list(task.chain), "depth": len(task.chain), "traceId": task.trace_id,
    }
    if task.error is not None:
        out["error"] = {"code": task.error.code, "message": task.error.message}
    if task.budget is not None:
        out["budget"] = {"startUsd": str(task.budget.start_usd),
                         "spentUsd": str(task.budget.spent_usd),
                         "leftUsd": str(task.budget.left_usd)}
    if task.cost is not None:
        out["cost"] = encode_cost(task.cost)
    if task.receipts:
        out["receipts"] = list(task.receipts)
    if task.asked_by:
        out["askedBy"] = task.asked_by
    return {SWARM_EXTENSION_URI: out}


def encode_cost(node: CostNode) -> dict[str, Any]:
    """The cost tree in the A2A bindings' lowerCamelCase (Butler /v2 has it in snake_case)."""
    return {"agent": node.agent, "skill": node.skill, "costUsd": str(node.cost_usd),
            "totalUsd": str(node.total_usd), "durationMs": node.duration_ms,
            "status": node.status, "children": [encode_cost(c) for c in node.children]}


def encode_task(task: Task, *, history_length: int | None = None,
                include_artifacts: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"id": task.wire_id, "contextId": task.context_id,
                           "status": encode_status(task)}
    artifacts = task_artifacts(task) if include_artifacts else ()
    if artifacts:
        out["artifacts"] = [encode_artifact(a) for a in artifacts]
    messages = trim_history(history(task), history_length)
    if messages:
        out["history"] = [encode_message(m) for m in messages]
    out["metadata"] = butler_metadata(task)
    return out


def encode_event(event: TaskEvent) -> dict[str, Any]:
    """One ``StreamResponse``: the task itself, a status update or an artifact update."""
    task = event.task
    if event.kind == "message" and (reply := reply_message(task)) is not None:
        return {"message": encode_message(reply)}
    if event.kind == "task":
        return {"task": encode_task(task)}
    if event.kind == "artifact" and event.artifact is not None:
        return {"artifactUpdate": {"taskId": task.wire_id, "contextId": task.context_id,
                                   "artifact": encode_artifact(event.artifact),
                                   "append": event.append, "lastChunk": event.last_chunk}}
    update: dict[str, Any] = {"taskId": task.wire_id, "contextId": task.context_id,
                              "status": encode_status(task)}
    if task.receipts or task.asked_by:
        update["metadata"] = update_metadata(task)
    return {"statusUpdate": update}


def update_metadata(task: Task) -> dict[str, Any]:
    """A stream's last status update carries the signed receipts (the caller keeps them);
    a question relayed from down the delegation path, the agent that asked it."""
    out: dict[str, Any] = {}
    if task.receipts:
        out["receipts"] = list(task.receipts)
    if task.asked_by:
        out["askedBy"] = task.asked_by
    return {SWARM_EXTENSION_URI: out}


def encode_page(page: TaskPage, query: ListQuery) -> dict[str, Any]:
    return {
        "tasks": [encode_task(t, history_length=query.history_length,
                              include_artifacts=query.include_artifacts) for t in page.tasks],
        "nextPageToken": page.next_cursor or "",
        "pageSize": query.page_size,
        "totalSize": page.total if page.total is not None else len(page.tasks),
    }


def encode_push_config(config: PushConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"id": config.id, "taskId": wire_task_id(config.task_id),
                           "url": config.url}
    if config.token:
        out["token"] = config.token
    if config.auth_scheme:
        out["authentication"] = {"scheme": config.auth_scheme}
        if config.auth_credentials:
            out["authentication"]["credentials"] = config.auth_credentials
    return out


def encode_error_info(err: ButlerError) -> dict[str, Any]:
    """The ``google.rpc.ErrorInfo`` detail of an error; metadata values are strings."""
    reason, domain = err.spec.error_info(err.code)
    meta = {k: v if isinstance(v, str) else exact_json.dumps(v) for k, v in err.details.items()}
    meta["code"] = err.code
    return {"@type": ERROR_INFO_TYPE, "reason": reason, "domain": domain, "metadata": meta}
