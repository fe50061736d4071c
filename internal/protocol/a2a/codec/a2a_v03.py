"""A2A 0.3 wire format: ``kind``-tagged parts and events, lowercase states.

Only the shapes differ from 1.0; the operations are the same (``A2AOperations``).
"""

from __future__ import annotations

from typing import Any

from internal.protocol.a2a.codec import a2a_v1, proto3
from internal.protocol.a2a.codec.a2a_v1 import MAX_PARTS, butler_metadata
from internal.protocol.a2a.model import (
    Artifact,
    Message,
    Part,
    PushConfig,
    SendParams,
    Task,
    TaskEvent,
    history,
    interrupted_or_terminal,
    message_fields,
    reply_message,
    task_artifacts,
    trim_history,
    wire_task_id,
)

_ROLES = {"user": "user", "agent": "agent"}

# --- decoding requests -----------------------------------------------------------


def decode_part(raw: Any, where: str) -> Part:
    item = proto3.obj(raw, where)
    meta = proto3.metadata(item, where)
    kind = item.get("kind")
    if kind == "text":
        return Part(text=proto3.string(item, "text", where, max_len=256 * 1024), metadata=meta)
    if kind == "data":
        return Part(data=proto3.obj(item.get("data"), f"{where}.data"), metadata=meta)
    if kind == "file":
        file = proto3.obj(item.get("file"), f"{where}.file")
        out: dict[str, Any] = {}
        if isinstance(file.get("uri"), str):
            out["uri"] = file["uri"]
        elif "bytes" in file:
            out["bytes"] = proto3.base64_text(file["bytes"], f"{where}.file.bytes")
        else:
            raise proto3.bad(f"{where}.file needs uri or bytes")
        for key in ("mimeType", "name"):
            if value := proto3.string(file, key, f"{where}.file", max_len=1024):
                out[key] = value
        return Part(file=out, metadata=meta)
    raise proto3.bad(f"{where}.kind must be text, data or file")


def decode_message(raw: Any, where: str = "message") -> Message:
    data = proto3.obj(raw, where)
    if data.get("kind", "message") != "message":
        raise proto3.bad(f"{where}.kind must be message")
    role = proto3.enum(data.get("role"), _ROLES, {}, f"{where}.role")
    if role != "user":
        raise proto3.bad(f"{where}.role must be user")
    parts = data.get("parts")
    if not isinstance(parts, list) or not parts or len(parts) > MAX_PARTS:
        raise proto3.bad(f"{where}.parts must be a list of 1 to {MAX_PARTS} parts")
    return Message(
        message_id=proto3.string(data, "messageId", where, required=True, max_len=256),
        role=role,
        parts=tuple(decode_part(p, f"{where}.parts[{i}]") for i, p in enumerate(parts)),
        context_id=proto3.string(data, "contextId", where, max_len=256),
        task_id=proto3.string(data, "taskId", where, max_len=256),
        metadata=proto3.metadata(data, where),
        extensions=proto3.strings(data, "extensions", where),
        reference_task_ids=proto3.strings(data, "referenceTaskIds", where),
    )


def decode_push_config(raw: Any, where: str, *, task_id: str) -> PushConfig:
    data = proto3.obj(raw, where)
    scheme = credentials = ""
    auth = data.get("authentication")
    if auth is not None:
        auth = proto3.obj(auth, f"{where}.authentication")
        schemes = proto3.strings(auth, "schemes", f"{where}.authentication", max_len=64)
        scheme = schemes[0] if schemes else ""
        credentials = proto3.string(auth, "credentials", f"{where}.authentication",
                                  max_len=4096)
    return PushConfig(
        id=proto3.string(data, "id", where, max_len=128), task_id=task_id,
        url=proto3.string(data, "url", where, required=True, max_len=2048),
        token=proto3.string(data, "token", where, max_len=4096),
        auth_scheme=scheme, auth_credentials=credentials, wire="0.3")


def decode_send_params(raw: Any) -> SendParams:
    params = proto3.obj(raw, "params")
    message = decode_message(params.get("message"))
    config = params.get("configuration")
    if config is None:
        return SendParams(message=message, metadata=proto3.metadata(params, "params"))
    config = proto3.obj(config, "configuration")
    blocking = proto3.boolean(config, "blocking", "configuration")
    push = config.get("pushNotificationConfig")
    length = proto3.integer(config, "historyLength", "configuration")
    return SendParams(
        message=message,
        return_immediately=blocking is False,
        history_length=length or None,  # 0.3: 0 means all of it
        push=None if push is None else decode_push_config(
            push, "configuration.pushNotificationConfig", task_id=""),
        accepted_output_modes=proto3.strings(config, "acceptedOutputModes", "configuration"),
        metadata=proto3.metadata(params, "params"),
    )


def decode_task_push_config(raw: Any) -> PushConfig:
    params = proto3.obj(raw, "params")
    task_id = proto3.string(params, "taskId", "params", required=True, max_len=256)
    return decode_push_config(params.get("pushNotificationConfig"),
                              "params.pushNotificationConfig", task_id=task_id)


# --- encoding answers -----------------------------------------------------------


def encode_part(part: Part) -> dict[str, Any]:
    out: dict[str, Any]
    if part.text is not None:
        out = {"kind": "text", "text": part.text}
    elif part.data is not None:
        out = {"kind": "data", "data": part.data}
    else:
        src = part.file or {}
        file: dict[str, Any] = {}
        if src.get("uri") or src.get("url"):
            file["uri"] = str(src.get("uri") or src.get("url"))
        else:
            file["bytes"] = str(src.get("bytes") or src.get("raw") or "")
        if media := src.get("mimeType") or src.get("mediaType"):
            file["mimeType"] = str(media)
        if name := src.get("name") or src.get("filename"):
            file["name"] = str(name)
        out = {"kind": "file", "file": file}
    if part.metadata:
        out["metadata"] = part.metadata
    return out


def encode_message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "message", "messageId": message.message_id,
                           "role": message.role,
                           "parts": [encode_part(p) for p in message.parts]}
    out.update(message_fields(message))
    return out


def encode_artifact(artifact: Artifact) -> dict[str, Any]:
    return a2a_v1.encode_artifact(artifact, encode_part)


def encode_status(task: Task) -> dict[str, Any]:
    return a2a_v1.encode_status(task, task.state.value, encode_message)


def encode_task(task: Task, *, history_length: int | None = None) -> dict[str, Any]:
    return {
        "kind": "task", "id": task.wire_id, "contextId": task.context_id,
        "status": encode_status(task),
        "artifacts": [encode_artifact(a) for a in task_artifacts(task)],
        "history": [encode_message(m) for m in trim_history(history(task), history_length)],
        "metadata": butler_metadata(task),
    }


def encode_event(event: TaskEvent) -> dict[str, Any]:
    task = event.task
    if event.kind == "message" and (reply := reply_message(task)) is not None:
        return encode_message(reply)
    if event.kind == "task":
        return encode_task(task)
    if event.kind == "artifact" and event.artifact is not None:
        return {"kind": "artifact-update", "taskId": task.wire_id, "contextId": task.context_id,
                "artifact": encode_artifact(event.artifact), "append": event.append,
                "lastChunk": event.last_chunk}
    update: dict[str, Any] = {
        "kind": "status-update", "taskId": task.wire_id, "contextId": task.context_id,
        "status": encode_status(task), "final": interrupted_or_terminal(task.state)}
    if task.receipts or task.asked_by:
        update["metadata"] = a2a_v1.update_metadata(task)
    return update


def encode_push_config(config: PushConfig) -> dict[str, Any]:
    inner: dict[str, Any] = {"id": config.id, "url": config.url}
    if config.token:
        inner["token"] = config.token
    if config.auth_scheme:
        inner["authentication"] = {"schemes": [config.auth_scheme]}
        if config.auth_credentials:
            inner["authentication"]["credentials"] = config.auth_credentials
    return {"taskId": wire_task_id(config.task_id), "pushNotificationConfig": inner}
