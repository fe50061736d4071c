"""Butler /v2 REST wire format: decode requests, encode tasks (the envelope: ``swarm_envelope``).

Amounts travel as decimal strings; numbers are accepted on input (parsed as Decimal).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from internal.protocol.a2a.codec.exact_json import dumps_bytes, plain_numbers
from internal.protocol.a2a.model import (
    Artifact,
    Budget,
    CostNode,
    Part,
    RequestError,
    StatusEntry,
    Task,
    TaskError,
    TaskRequest,
    TaskState,
    wire_task_id,
)

AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
MAX_BUDGET = Decimal("1000000")
MAX_TEXT = 256 * 1024
_REQUEST_KEYS = frozenset({
    "id", "task", "input", "parts", "capabilities_needed", "skill", "caller_chain", "budget",
    "mode", "context_id", "timeout_seconds", "trace_id", "tree_id",
})


def _bad(message: str, code: str = "invalid_request") -> RequestError:
    return RequestError(code, message)


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(f"{where} must be a JSON object")
    return value


def _strings(value: Any, where: str, pattern: re.Pattern[str], limit: int = 64) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > limit:
        raise _bad(f"{where} must be a list of at most {limit} strings")
    for item in value:
        if not isinstance(item, str) or not pattern.fullmatch(item):
            raise _bad(f"{where} entries must be ids (letters, digits, . _ : -), got {item!r}")
    return tuple(value)


MAX_AMOUNT = Decimal("1e15")  # USD; past it no amount in any document is believable
_MAX_AMOUNT_CHARS = 64


def parse_amount(value: Any) -> Decimal | None:
    """The one parse of a USD amount from a document someone else wrote (a request, a
    card, a receipt): a finite decimal of at most ``MAX_AMOUNT`` either way, from a string,
    an int or a Decimal (a JSON number), or None. Bounded, so that sums and comparisons of
    such amounts never raise (``decimal.Overflow`` from ``1e999999`` plus itself)."""
    if isinstance(value, bool) or not isinstance(value, Decimal | int | str):
        return None
    if isinstance(value, str) and len(value) > _MAX_AMOUNT_CHARS:
        return None
    try:
        amount = Decimal(value.strip()) if isinstance(value, str) else Decimal(value)
    except (ArithmeticError, ValueError):
        return None
    # copy_abs, not abs(): abs() rounds to the context, and overflows past its exponent.
    return amount if amount.is_finite() and amount.copy_abs() <= MAX_AMOUNT else None


def decode_money(value: Any, where: str) -> Decimal:
    amount = parse_amount(value)
    if amount is None:
        raise _bad(f"{where} must be a decimal amount in USD", "invalid_envelope")
    if amount < 0 or amount > MAX_BUDGET:
        raise _bad(f"{where} must be between 0 and {MAX_BUDGET}", "invalid_envelope")
    return amount


def decode_parts(value: Any, where: str = "parts") -> tuple[Part, ...]:
    if not isinstance(value, list) or len(value) > 256:
        raise _bad(f"{where} must be a list of at most 256 parts")
    parts = []
    for i, raw in enumerate(value):
        item = _mapping(raw, f"{where}[{i}]")
        meta = item.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise _bad(f"{where}[{i}].metadata must be an object")
        meta = plain_numbers(meta) if meta is not None else None
        if isinstance(item.get("text"), str):
            parts.append(Part(text=item["text"], metadata=meta))
        elif isinstance(item.get("data"), dict):
            parts.append(Part(data=plain_numbers(item["data"]), metadata=meta))
        elif isinstance(item.get("file"), dict):
            parts.append(Part(file=plain_numbers(item["file"]), metadata=meta))
        else:
            raise _bad(f"{where}[{i}] needs text (string), data (object) or file (object)")
    return tuple(parts)


def decode_task_request(body: Any) -> TaskRequest:
    data = _mapping(body, "request body")
    unknown = set(data) - _REQUEST_KEYS
    if unknown:
        raise _bad(f"unknown field(s): {', '.join(sorted(unknown))}")
    text = data.get("task", "")
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise _bad(f"task must be a string of at most {MAX_TEXT} characters")
    input_ = data.get("input")
    given = input_ is not None  # {} is an input: a skill may take no arguments
    input_ = plain_numbers(_mapping(input_, "input")) if given else {}
    parts = decode_parts(data["parts"]) if "parts" in data else ()
    if not text and not given and not parts:
        raise _bad("a task needs task (text), input or parts")
    mode = data.get("mode", "blocking")
    if mode not in ("blocking", "async"):
        raise _bad("mode must be 'blocking' or 'async'")
    task_id = _optional_id(data.get("id"), "id")
    context_id = _optional_id(data.get("context_id"), "context_id")
    skill = _optional_id(data.get("skill"), "skill")
    caps = _strings(data.get("capabilities_needed", []), "capabilities_needed", AGENT_ID)
    timeout = data.get("timeout_seconds")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | Decimal) or not (
            0 < timeout <= 86400
        ):
            raise _bad("timeout_seconds must be a number in (0, 86400]")
        timeout = float(timeout)
    return TaskRequest(
        text=text, id=task_id, context_id=context_id, input=input_, parts=parts,
        capabilities_needed=caps, skill=skill, blocking=mode == "blocking",
        timeout_seconds=timeout,
    )


def _optional_id(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _TASK_ID.fullmatch(value):
        raise _bad(f"{where} must be 1-128 letters, digits or . _ : -")
    return value


def encode_part(part: Part) -> dict[str, Any]:
    # ``Part.kind``'s test, spelled out: this runs for every part of every answer.
    out: dict[str, Any]
    if part.text is not None:
        out = {"kind": "text", "text": part.text}
    elif part.data is not None:
        out = {"kind": "data", "data": part.data}
    else:
        out = {"kind": "file", "file": part.file}
    if part.metadata:
        out["metadata"] = part.metadata
    return out


def encode_artifact(artifact: Artifact) -> dict[str, Any]:
    out: dict[str, Any] = {
        "artifact_id": artifact.artifact_id,
        "parts": [encode_part(p) for p in artifact.parts],
    }
    if artifact.name:
        out["name"] = artifact.name
    if artifact.description:
        out["description"] = artifact.description
    if artifact.source:  # relayed from down the delegation path: the agent that made it
        out["source"] = artifact.source
    return out


def encode_cost(node: CostNode) -> dict[str, Any]:
    return {
        "agent": node.agent,
        "skill": node.skill,
        "cost_usd": str(node.cost_usd),
        "total_usd": str(node.total_usd),
        "duration_ms": node.duration_ms,
        "status": node.status,
        "children": [encode_cost(c) for c in node.children],
    }


# The longest agent name kept: a relayed question's asker, a relayed artifact's source.
MAX_AGENT_NAME = 256

# A state's wire name; ``TaskState.value`` is a property, looked up in Python each time.
_STATE_NAMES = {s: s.value for s in TaskState}


def encode_task(task: Task) -> dict[str, Any]:
    state = _STATE_NAMES[task.state]
    updated_at = task.updated_at
    parts = task.parts
    chain = task.chain
    out: dict[str, Any] = {
        "id": wire_task_id(task.id),
        "context_id": task.context_id,
        "state": state,
        "skill": task.skill,
        "capabilities_needed": list(task.request.capabilities_needed),
        "created_at": task.created_at,
        "updated_at": updated_at,
        "status": {"state": state, "message": task.status_message, "at": updated_at},
        "history": [{"state": _STATE_NAMES[h.state], "at": h.at, "message": h.message}
                    for h in task.history],
        "result": {
            "parts": [encode_part(p) for p in parts],
            "artifacts": [encode_artifact(a) for a in task.artifacts],
        },
        "output": "\n".join([p.text for p in parts if p.text is not None]),
        "swarm": {"caller_chain": list(chain), "depth": len(chain),
                  "trace_id": task.trace_id},
    }
    if task.error is not None:
        out["error"] = {"code": task.error.code, "message": task.error.message}
    budget = task.budget
    if budget is not None:
        out["budget"] = {
            "start_usd": str(budget.start_usd),
            "spent_usd": str(budget.spent_usd),
            "left_usd": str(budget.left_usd),
        }
    if task.cost is not None:
        out["cost"] = encode_cost(task.cost)
    if task.receipts:
        out["receipts"] = list(task.receipts)
    if task.asked_by:  # a question relayed from down the delegation path: who asked it
        out["status"]["asked_by"] = task.asked_by
    return out


def task_json(task: Task) -> bytes:
    """``encode_task`` as JSON bytes: the /v2 answer."""
    return dumps_bytes(encode_task(task))


# --- decoding a peer's answer (the outbound side) ---------------------------------


def decode_cost(value: Any) -> CostNode:
    data = _mapping(value, "cost")
    children = data.get("children", [])
    if not isinstance(children, list) or len(children) > 1000:
        raise _bad("cost.children must be a list")
    duration = data.get("duration_ms", 0)
    if isinstance(duration, bool) or not isinstance(duration, int):
        raise _bad("cost.duration_ms must be an integer")
    return CostNode(
        agent=str(data.get("agent", "")),
        skill=str(data.get("skill", "")),
        cost_usd=decode_money(data.get("cost_usd", "0"), "cost.cost_usd"),
        duration_ms=duration,
        status=str(data.get("status", "")),
        children=tuple(decode_cost(c) for c in children),
    )


def _list(value: Any, where: str) -> list[Any]:
    """An optional list in a peer's answer: absent (or null) is empty."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad(f"{where} must be a list")
    return value


_STATES = {s.value: s for s in TaskState}


def _state(value: Any) -> TaskState | None:
    return _STATES.get(value) if isinstance(value, str) else None


def _history(entries: list[Any]) -> tuple[StatusEntry, ...]:
    """A peer's history; entries that are not objects, or name no known state, are left out."""
    out = []
    for h in entries:
        if isinstance(h, dict) and (state := _state(h.get("state"))) is not None:
            out.append(StatusEntry(state, str(h.get("at", "")), str(h.get("message", ""))))
    return tuple(out)


def decode_artifact(value: Any, where: str = "artifact") -> Artifact:
    item = _mapping(value, where)
    return Artifact(
        artifact_id=str(item.get("artifact_id", "")),
        parts=decode_parts(item.get("parts", []), f"{where}.parts"),
        name=str(item.get("name", "")),
        description=str(item.get("description", "")),
        source=str(item.get("source", "") or "")[:MAX_AGENT_NAME],
    )


def decode_task(value: Any) -> Task:
    """A task as a peer reports it; strict enough that garbage fails loudly."""
    data = _mapping(value, "task")
    state = _state(data.get("state"))
    if state is None:
        raise _bad("task.state missing or unknown")
    result = data.get("result") or {}
    _mapping(result, "result")
    artifacts = [decode_artifact(raw, f"artifacts[{i}]")
                 for i, raw in enumerate(_list(result.get("artifacts"), "result.artifacts"))]
    error = None
    if isinstance(data.get("error"), dict):
        error = TaskError(str(data["error"].get("code", "peer_error")),
                          str(data["error"].get("message", "")))
    budget = None
    if isinstance(data.get("budget"), dict):
        budget = Budget(
            start_usd=decode_money(data["budget"].get("start_usd", "0"), "budget.start_usd"),
            spent_usd=decode_money(data["budget"].get("spent_usd", "0"), "budget.spent_usd"),
        )
    swarm: dict[str, Any] = data["swarm"] if isinstance(data.get("swarm"), dict) else {}
    status: dict[str, Any] = data["status"] if isinstance(data.get("status"), dict) else {}
    return Task(
        id=str(data.get("id", "")),
        context_id=str(data.get("context_id", "")),
        owner="",
        state=state,
        request=TaskRequest(),
        created_at=str(data.get("created_at", "")),
        updated_at=str(data.get("updated_at", "")),
        skill=str(data.get("skill", "")),
        history=_history(_list(data.get("history"), "history")),
        parts=decode_parts(result.get("parts", []) or [], "result.parts"),
        artifacts=tuple(artifacts),
        error=error,
        status_message=str(status.get("message", "")),
        budget=budget,
        cost=decode_cost(data["cost"]) if data.get("cost") is not None else None,
        chain=tuple(str(c) for c in _list(swarm.get("caller_chain"), "swarm.caller_chain")),
        trace_id=str(swarm.get("trace_id", "") or ""),
        receipts=_receipts(data.get("receipts")),
        asked_by=str(status.get("asked_by", "") or "")[:MAX_AGENT_NAME],
    )


def _receipts(value: Any) -> tuple[str, ...]:
    """A peer's receipts, kept as they came: ``butler receipt verify`` judges them."""
    items = _list(value, "receipts")
    if len(items) > 1000 or not all(isinstance(r, str) for r in items):
        raise _bad("receipts must be a list of strings")
    return tuple(items)


def encode_request(
    request: TaskRequest, *, chain: tuple[str, ...] = (), budget: Decimal | None = None
) -> dict[str, Any]:
    """The /v2/tasks body for ``request``; what ``decode_task_request`` reads back."""
    out: dict[str, Any] = {"task": request.text, "mode": "blocking" if request.blocking
                           else "async"}
    if request.id:
        out["id"] = request.id
    if request.context_id:
        out["context_id"] = request.context_id
    if request.input or not (request.text or request.parts):  # {} alone is the input
        out["input"] = request.input
    if request.parts:
        out["parts"] = [encode_part(p) for p in request.parts]
    if request.capabilities_needed:
        out["capabilities_needed"] = list(request.capabilities_needed)
    if request.skill:
        out["skill"] = request.skill
    if request.timeout_seconds is not None:
        out["timeout_seconds"] = Decimal(str(request.timeout_seconds))
    if chain:
        out["caller_chain"] = list(chain)
    if budget is not None:
        out["budget"] = str(budget)
    return out
