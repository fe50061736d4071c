"""A task's stored row: a few indexed columns and a compact body (docs/tasks.md#storage).

The columns hold what queries filter and sort on, each once: ``id``, ``owner`` (its
number in ``task_owners``, ``butler.storage.NumberedNames``),
``context_id``, ``state`` (a small integer, ``STATE_CODES``) and ``updated`` (microseconds
since the epoch). The body is a JSON array of everything else, by position, trailing
empty fields left out: no key names, nothing the API derives (``status``, ``output``,
``depth``, totals) and times as integer offsets. A task the store writes comes back equal
(``decode_row(*row_columns(task)) == task``); a time that is not in the store's canonical
form (``2026-11-24T01:52:18.123456Z``) is kept as the text it was. Receipts are kept
compact (``receipt_rows``); the binary fields of those follow the JSON text after a NUL,
which JSON text never holds raw, and the body is then a BLOB.

A body is written in the compact layout (``_COMPACT``; docs/tasks.md#storage): a BLOB
that starts with the byte 0x01 (JSON text never does), its fields ordered so that the
ones most tasks leave empty come last, an empty one in the middle written ``0``, and
what repeats the task's other fields written as a mark: a history that is just
submitted and working at creation and the final state at the last update, a chain that
is just the caller, a cost whose skill and status are the task's, a request for the
task's skill, a result that is the request's text; the trace id as its 16 bytes at the
head of the binary fields. Rows written before it (a JSON array, TEXT or BLOB) are read
as they are.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from butler.engine.receipt_rows import Signers, task_claims
from butler.identity.receipts import parts_digest
from butler.storage import NumberedNames, hex_bytes, hex_text, micros_stamp, stamp_micros
from internal.protocol.a2a.codec import butler_v2, exact_json
from internal.protocol.a2a.model import (
    Artifact,
    Budget,
    CostNode,
    Message,
    Part,
    StatusEntry,
    Task,
    TaskError,
    TaskRequest,
    TaskState,
    wire_task_id,
)

# Stored codes: append only, never renumber (rows on disk carry them).
STATE_CODES: dict[TaskState, int] = {
    TaskState.SUBMITTED: 0, TaskState.WORKING: 1, TaskState.INPUT_REQUIRED: 2,
    TaskState.AUTH_REQUIRED: 3, TaskState.COMPLETED: 4, TaskState.FAILED: 5,
    TaskState.CANCELED: 6, TaskState.REJECTED: 7,
}
CODE_STATES: dict[int, TaskState] = {code: state for state, code in STATE_CODES.items()}
TERMINAL_CODES = tuple(code for state, code in STATE_CODES.items() if state.terminal)
OPEN_CODES = tuple(code for state, code in STATE_CODES.items() if not state.terminal)

NO_SIGNERS = Signers()  # every receipt kept as its text
OWNERS_TABLE = "task_owners"
NO_OWNERS = NumberedNames(OWNERS_TABLE)  # every owner kept as its text
NOT_CANONICAL = 0  # ``updated`` of a task whose time is not canonical: sorts first


def row_columns(task: Task, signers: Signers = NO_SIGNERS, owners: NumberedNames = NO_OWNERS,
                ) -> tuple[Any, object, Any, int, int, str | bytes]:
    """(id, owner, context_id, state, updated, body), as stored: ids Butler made (hex)
    as their bytes (``hex_bytes``); the owner as its number in ``task_owners`` if it has
    one; receipts of a known signer compact (``receipt_rows``)."""
    updated = stamp_micros(task.updated_at)
    body = _encode_body(task, updated, signers)
    return (hex_bytes(task.id), owners.stored(task.owner), hex_bytes(task.context_id),
            STATE_CODES[task.state], NOT_CANONICAL if updated is None else updated, body)


def decode_row(task_id: object, owner: object, context_id: object, state: int, updated: int,
               body: str | bytes, *, signers: Signers = NO_SIGNERS,
               owners: NumberedNames = NO_OWNERS) -> Task:
    owner = owners.name(owner)
    if not isinstance(owner, str):
        raise ValueError("a task row's owner number is not in task_owners")
    if type(body) is bytes and body[:1] == _COMPACT:
        return _decode_compact(task_id, owner, context_id, state, updated, body, signers)
    binary = b""
    if type(body) is bytes:
        text, _, binary = body.partition(b"\x00")
        body = text.decode()
    data = exact_json.loads(body, max_depth=256)
    fields = list(data) + [None] * (len(_FIELDS) - len(data))
    (created, skill, history, parts, artifacts, error, status_message, budget, cost, chain,
     trace_id, request, messages, reply_as_message, updated_text, receipts) = fields
    updated_at = updated_text if updated_text is not None else micros_stamp(updated)
    created_at = _time(created, updated, negate=True) if created is not None else updated_at
    base = stamp_micros(created_at)
    key, task_state = str(hex_text(task_id)), CODE_STATES[state]
    spent = Budget(Decimal(budget[0]), Decimal(budget[1])) if budget else None
    costs, trace_id = _cost(cost) if cost else None, trace_id or ""
    return Task(
        id=key, context_id=str(hex_text(context_id)), owner=owner, state=task_state,
        request=_request(request),
        created_at=created_at, updated_at=updated_at, skill=skill or "",
        history=tuple(StatusEntry(CODE_STATES[h[0]], _time(h[1], base),
                                  h[2] if len(h) > 2 else "") for h in history or ()),
        parts=_parts(parts), artifacts=tuple(_artifact(a) for a in artifacts or ()),
        error=TaskError(error[0], error[1]) if error else None,
        status_message=status_message or "", budget=spent, cost=costs,
        chain=tuple(chain or ()), trace_id=trace_id,
        messages=tuple(_message(m) for m in messages or ()),
        reply_as_message=reply_as_message is True,
        receipts=signers.rebuilt(receipts, lambda: task_claims(
            wire_task_id(key), task_state, costs, spent, trace_id, updated_at), binary,
            with_digest=True) if receipts else (),
    )


_FIELDS = ("created", "skill", "history", "parts", "artifacts", "error", "status_message",
           "budget", "cost", "chain", "trace_id", "request", "messages", "reply_as_message",
           "updated_text", "receipts")


_COMPACT = b"\x01"
_TRACE = 16  # a hex trace id's bytes, first of the binary fields


def _encode_body(task: Task, updated: int | None, signers: Signers) -> bytes:
    created = stamp_micros(task.created_at)
    created_field: Any = updated - created if updated is not None and created is not None \
        else None if task.created_at == task.updated_at else task.created_at
    request = task.request
    trace = hex_bytes(task.trace_id) if len(task.trace_id) == 2 * _TRACE else None
    receipts, binary = signers.stored(task.receipts, task) if task.receipts else ([], b"")
    fields: list[Any] = [
        created_field, task.skill or 0,
        1 if request.text and task.parts == (Part(text=request.text),)
        else [_part(p) for p in task.parts] or 0,
        [str(task.budget.start_usd), str(task.budget.spent_usd)]
        if task.budget is not None else 0,
        _compact_cost(task.cost, task) if task.cost is not None else 0,
        1 if type(trace) is bytes else task.trace_id or 0,
        _encode_request(request, task.skill),
        0 if task.history == _plain_history(task) else [
            _status(h, created) for h in task.history],
        (1 if task.chain == (task.owner,) else list(task.chain)) if task.chain else 0,
        receipts or 0,
        [[a.artifact_id, [_part(p) for p in a.parts], a.name, a.description]
         for a in task.artifacts] or 0,
        [task.error.code, task.error.message] if task.error is not None else 0,
        task.status_message or 0,
        [_encode_message(m) for m in task.messages] or 0,
        1 if task.reply_as_message else 0,
        task.updated_at if updated is None else 0,
    ]
    while fields and fields[-1] == 0 and type(fields[-1]) is int:
        fields.pop()
    if type(trace) is bytes:
        binary = trace + binary
    text = exact_json.dumps_bytes(fields)
    # JSON text never holds a raw NUL (it is written \u0000), so it ends the text.
    return _COMPACT + text + (b"\x00" + binary if binary else b"")


def _decode_compact(task_id: object, owner: str, context_id: object, state: int,
                    updated: int, body: bytes, signers: Signers) -> Task:
    text, _, binary = body[1:].partition(b"\x00")
    data = exact_json.loads(text, max_depth=256)
    (created, skill, parts, budget, cost, trace_id, request, history, chain, receipts,
     artifacts, error, status_message, messages, reply_as_message, updated_text) = \
        list(data) + [0] * (16 - len(data))
    updated_at = updated_text if type(updated_text) is str else micros_stamp(updated)
    created_at = micros_stamp(updated - created) if type(created) is int \
        else created if type(created) is str else updated_at
    key, task_state, skill = str(hex_text(task_id)), CODE_STATES[state], skill or ""
    if trace_id == 1:
        trace_id, binary = binary[:_TRACE].hex(), binary[_TRACE:]
    spent = Budget(Decimal(budget[0]), Decimal(budget[1])) if budget else None
    costs, trace_id = _cost(cost, skill, task_state) if cost else None, trace_id or ""
    decoded = _request(request, skill)
    base = stamp_micros(created_at)
    result = (Part(text=decoded.text),) if parts == 1 else _parts(parts)
    kept = tuple(_artifact(a) for a in artifacts or ())
    return Task(
        id=key, context_id=str(hex_text(context_id)), owner=owner, state=task_state,
        request=decoded, created_at=created_at, updated_at=updated_at, skill=skill,
        history=(StatusEntry(TaskState.SUBMITTED, created_at),
                 StatusEntry(TaskState.WORKING, created_at),
                 StatusEntry(task_state, updated_at)) if history == 0 else
        tuple(StatusEntry(CODE_STATES[h[0]], _time(h[1], base), h[2] if len(h) > 2 else "")
              for h in history),
        parts=result, artifacts=kept,
        error=TaskError(error[0], error[1]) if error else None,
        status_message=status_message or "", budget=spent, cost=costs,
        chain=(owner,) if chain == 1 else tuple(chain or ()), trace_id=trace_id,
        messages=tuple(_message(m) for m in messages or ()),
        reply_as_message=reply_as_message == 1,
        receipts=signers.rebuilt(receipts, lambda: task_claims(
            wire_task_id(key), task_state, costs, spent, trace_id, updated_at,
            parts_digest(result, kept)), binary) if receipts else (),
    )


def _plain_history(task: Task) -> tuple[StatusEntry, ...]:
    """The history most tasks have: submitted and working at creation, then their
    state at their last update."""
    return (StatusEntry(TaskState.SUBMITTED, task.created_at),
            StatusEntry(TaskState.WORKING, task.created_at),
            StatusEntry(task.state, task.updated_at))


def _compact_cost(node: CostNode, task: Task) -> list[Any]:
    """A task's own cost node: its skill and status ``0`` where they are the task's."""
    out: list[Any] = [node.agent, 0 if node.skill == task.skill else node.skill,
                      str(node.cost_usd), node.duration_ms,
                      0 if node.status == task.state.value else node.status]
    if node.children:
        out.append([_encode_cost(c) for c in node.children])
    return out


def _encode_request(request: TaskRequest, task_skill: str | None) -> list[Any]:
    """``task_skill``: the task's, written as ``1`` where the request names it."""
    skill = 1 if task_skill and request.skill == task_skill else request.skill
    return _trimmed([
        request.text, skill, list(request.capabilities_needed),
        None if request.blocking else 0, request.id, request.context_id,
        request.input or None, [_part(p) for p in request.parts], request.timeout_seconds,
    ])


def _request(value: list[Any], task_skill: str | None = None) -> TaskRequest:
    """The stored request, as the daemon decoded it when it came in: a skill's input
    holds ordinary numbers (``plain_numbers``), as the request decoder gives them."""
    f = list(value) + [None] * (9 - len(value))
    return TaskRequest(
        text=f[0] or "", skill=task_skill if f[1] == 1 and task_skill else f[1],
        capabilities_needed=tuple(f[2] or ()),
        blocking=f[3] is None, id=f[4], context_id=f[5],
        input=exact_json.plain_numbers(f[6]) if f[6] else {}, parts=_parts(f[7]),
        timeout_seconds=None if f[8] is None else float(f[8]),
    )


def _trimmed(fields: list[Any]) -> list[Any]:
    """Trailing empty fields left out: a reader fills them in."""
    while fields and fields[-1] in (None, "", []):
        fields.pop()
    return fields


def _time(value: Any, base: int | None, *, negate: bool = False) -> str:
    """A stored time: an offset (from ``base``) or text kept as it was."""
    if isinstance(value, str) or base is None:
        return str(value)
    return micros_stamp(base - value if negate else base + value)


def _status(entry: StatusEntry, base: int | None) -> list[Any]:
    at = stamp_micros(entry.at)
    out: list[Any] = [STATE_CODES[entry.state],
                      at - base if at is not None and base is not None else entry.at]
    if entry.message:
        out.append(entry.message)
    return out


def _part(part: Part) -> Any:
    """A plain text part is its text; any other its /v2 encoding."""
    if part.text is not None and not part.metadata:
        return part.text
    return butler_v2.encode_part(part)


def _parts(values: Any) -> tuple[Part, ...]:
    if not values:
        return ()
    if all(isinstance(v, str) for v in values):
        return tuple(Part(text=v) for v in values)
    return butler_v2.decode_parts([{"kind": "text", "text": v} if isinstance(v, str) else v
                                   for v in values])


def _artifact(value: list[Any]) -> Artifact:
    return Artifact(artifact_id=value[0], parts=_parts(value[1]), name=value[2],
                    description=value[3])


def _encode_cost(node: CostNode) -> list[Any]:
    return [node.agent, node.skill, str(node.cost_usd), node.duration_ms, node.status,
            [_encode_cost(c) for c in node.children]]


def _cost(value: list[Any], skill: str | None = None,
          state: TaskState | None = None) -> CostNode:
    """A stored cost node; a task's own (``_compact_cost``) given its skill and state."""
    return CostNode(
        agent=value[0], skill=skill if value[1] == 0 and skill is not None else value[1],
        cost_usd=Decimal(value[2]), duration_ms=value[3],
        status=state.value if value[4] == 0 and state is not None else value[4],
        children=tuple(_cost(c) for c in value[5]) if len(value) > 5 else ())


def _encode_message(message: Message) -> list[Any]:
    fields: list[Any] = [
        message.message_id, message.role, [_part(p) for p in message.parts],
        message.context_id, message.task_id, message.metadata, list(message.extensions),
        list(message.reference_task_ids), message.at,
    ]
    return _trimmed(fields)


def _message(value: list[Any]) -> Message:
    fields = list(value) + [None] * (9 - len(value))
    return Message(
        message_id=fields[0], role=fields[1], parts=_parts(fields[2]),
        context_id=fields[3] or "", task_id=fields[4] or "", metadata=fields[5],
        extensions=tuple(fields[6] or ()), reference_task_ids=tuple(fields[7] or ()),
        at=fields[8] or "",
    )
