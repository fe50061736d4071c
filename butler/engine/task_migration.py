"""The task rows of earlier releases, read once to migrate a file to the current schema
(``task_schema``); nothing else reads them.

Schema 0 kept one JSON body per task (``{"task": <the /v2 task>, "owner", "request",
...}``). Schemas 1 to 5 kept the fields by position in a JSON array, some as "marks" for
what repeats the task, receipts taken apart into columns of ``receipt_signers`` and
binary fields after a NUL, owners numbered in ``task_owners`` and ids as their bytes.
Each decoder here gives the ``Task`` that release read back, receipts rebuilt to the
exact JWS text they were signed as, so the current layout stores what they held.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any

from butler.engine.task_document import micros_stamp, stamp_micros
from butler.identity.receipts import parts_digest
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
from internal.signing import b64url, canonical

# The states as schemas 1-5 numbered them.
STATE_CODES: dict[int, TaskState] = {
    0: TaskState.SUBMITTED, 1: TaskState.WORKING, 2: TaskState.INPUT_REQUIRED,
    3: TaskState.AUTH_REQUIRED, 4: TaskState.COMPLETED, 5: TaskState.FAILED,
    6: TaskState.CANCELED, 7: TaskState.REJECTED,
}
_COMPACT = b"\x01"  # a schema 4-5 body in the compact layout starts with it
_TRACE = 16  # a trace id's bytes, first of a compact body's binary fields
_PACKED = 16 + 64  # a receipt's id and signature, as bytes
_PACKED_WITH_DIGEST = 16 + 32 + 64  # id, result digest, signature: schema 4's layout
_DIGEST = "sha256:"


def hex_text(value: object) -> object:
    """An id schemas 1-5 kept as its bytes (Butler's lowercase hex ids), as text again."""
    return value.hex() if type(value) is bytes else value


class OldRows:
    """What a schema 1-5 file needs to read its rows: its receipt signers and its
    numbered owners."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        self.signers: dict[int, tuple[str, str, str]] = {}
        if "receipt_signers" in tables:
            self.signers = {ref: (protected, agent, url) for ref, protected, agent, url in
                            conn.execute("SELECT ref, protected, agent, url FROM "
                                         "receipt_signers")}
        self.owners: dict[int, str] = {}
        if "task_owners" in tables:
            self.owners = dict(conn.execute("SELECT ref, name FROM task_owners"))

    def task(self, task_id: object, owner: object, context_id: object, state: int,
             updated: int, body: str | bytes) -> Task:
        if type(owner) is bytes:
            number = int.from_bytes(owner, "big")
            if number not in self.owners:
                raise ValueError(f"task {hex_text(task_id)}: owner number {number} is not "
                                 "in task_owners")
            owner = self.owners[number]
        if not isinstance(owner, str):
            raise ValueError(f"task {hex_text(task_id)}: its owner is not text")
        if type(body) is bytes and body[:1] == _COMPACT:
            return self._compact(task_id, owner, context_id, state, updated, body)
        return self._array(task_id, owner, context_id, state, updated, body)

    def _array(self, task_id: object, owner: str, context_id: object, state: int,
               updated: int, body: str | bytes) -> Task:
        """Schemas 1-4: every field by position (receipts' binary fields after a NUL)."""
        binary = b""
        if type(body) is bytes:
            text, _, binary = body.partition(b"\x00")
            body = text.decode()
        data = exact_json.loads(body, max_depth=256)
        (created, skill, history, parts, artifacts, error, status_message, budget, cost,
         chain, trace_id, request, messages, reply_as_message, updated_text, receipts) = \
            list(data) + [None] * (16 - len(data))
        updated_at = updated_text if updated_text is not None else micros_stamp(updated)
        created_at = _time(created, updated, negate=True) if created is not None \
            else updated_at
        base = stamp_micros(created_at)
        key, task_state = str(hex_text(task_id)), STATE_CODES[state]
        spent = Budget(Decimal(budget[0]), Decimal(budget[1])) if budget else None
        costs, trace_id = _cost(cost) if cost else None, trace_id or ""
        return Task(
            id=key, context_id=str(hex_text(context_id)), owner=owner, state=task_state,
            request=_request(request), created_at=created_at, updated_at=updated_at,
            skill=skill or "",
            history=tuple(StatusEntry(STATE_CODES[h[0]], _time(h[1], base),
                                      h[2] if len(h) > 2 else "") for h in history or ()),
            parts=_parts(parts), artifacts=tuple(_artifact(a) for a in artifacts or ()),
            error=TaskError(error[0], error[1]) if error else None,
            status_message=status_message or "", budget=spent, cost=costs,
            chain=tuple(chain or ()), trace_id=trace_id,
            messages=tuple(_message(m) for m in messages or ()),
            reply_as_message=reply_as_message is True,
            receipts=self._receipts(receipts, lambda: _claims(
                wire_task_id(key), task_state, costs, spent, trace_id, updated_at), binary,
                _PACKED_WITH_DIGEST) if receipts else (),
        )

    def _compact(self, task_id: object, owner: str, context_id: object, state: int,
                 updated: int, body: bytes) -> Task:
        """Schemas 4-5's compact layout: empty fields ``0``, marks for what repeats the
        task, the trace id and receipts' binary fields after a NUL."""
        text, _, binary = body[1:].partition(b"\x00")
        data = exact_json.loads(text, max_depth=256)
        (created, skill, parts, budget, cost, trace_id, request, history, chain, receipts,
         artifacts, error, status_message, messages, reply_as_message, updated_text) = \
            list(data) + [0] * (16 - len(data))
        updated_at = updated_text if type(updated_text) is str else micros_stamp(updated)
        created_at = micros_stamp(updated - created) if type(created) is int \
            else created if type(created) is str else updated_at
        key, task_state, skill = str(hex_text(task_id)), STATE_CODES[state], skill or ""
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
            tuple(StatusEntry(STATE_CODES[h[0]], _time(h[1], base),
                              h[2] if len(h) > 2 else "") for h in history),
            parts=result, artifacts=kept,
            error=TaskError(error[0], error[1]) if error else None,
            status_message=status_message or "", budget=spent, cost=costs,
            chain=(owner,) if chain == 1 else tuple(chain or ()), trace_id=trace_id,
            messages=tuple(_message(m) for m in messages or ()),
            reply_as_message=reply_as_message == 1,
            receipts=self._receipts(receipts, lambda: _claims(
                wire_task_id(key), task_state, costs, spent, trace_id, updated_at,
                parts_digest(result, kept)), binary, _PACKED) if receipts else (),
        )

    def _receipts(self, stored: Sequence[Any], claims: Callable[[], dict[str, Any]],
                  binary: bytes, size: int) -> tuple[str, ...]:
        """Each receipt as it was signed: a text kept as it is; a compact one
        (``[signer, id, signature, digest, changed?]``, its id, signature and digest maybe
        in ``binary``) rebuilt from its signer's header and the task's claims."""
        base = claims() if any(isinstance(s, list) for s in stored) else {}
        out: list[str] = []
        at = 0
        for s in stored:
            if isinstance(s, str):
                out.append(s)
                continue
            if len(s) <= 2:  # its id and signature (and digest) are in ``binary``
                s = [s[0], *_unpacked(binary[at:at + size], size), *s[1:]]
                at += size
            out.append(self._jws(s, base))
        return tuple(out)

    def _jws(self, stored: list[Any], base: dict[str, Any]) -> str:
        if stored[0] not in self.signers:
            raise ValueError(f"receipt signer {stored[0]} is not in receipt_signers")
        protected, agent, url = self.signers[stored[0]]
        claims = {**base, "agent": agent, "url": url}
        if stored[1]:
            claims["receipt_id"] = "r-" + stored[1]
        if stored[3]:
            claims["digest"] = _DIGEST + stored[3]
        if len(stored) > 4:
            claims.update(stored[4])
        return f"{protected}.{b64url(_canonical(claims))}.{stored[2]}"


def decode_v0(task_id: str, body: str) -> Task:
    """A schema 0 row: ``{"task": <the /v2 task>, "owner", "request", "messages"?,
    "reply_as_message"?}``; messages in that version's encoding."""
    data = exact_json.loads(body, max_depth=256)
    task = butler_v2.decode_task(data["task"])
    messages = tuple(
        Message(message_id=m["message_id"], role=m["role"],
                parts=butler_v2.decode_parts(m["parts"]), context_id=m["context_id"],
                task_id=m["task_id"], metadata=m.get("metadata"),
                extensions=tuple(m.get("extensions", ())),
                reference_task_ids=tuple(m.get("reference_task_ids", ())), at=m["at"])
        for m in data.get("messages", ()))
    request = data["request"]
    if isinstance(request.get("timeout_seconds"), str):  # schema 0 wrote it as a string
        request["timeout_seconds"] = Decimal(request["timeout_seconds"])
    return replace(task, id=task_id, owner=data["owner"],
                   request=butler_v2.decode_task_request(request),
                   messages=messages, reply_as_message=data.get("reply_as_message") is True)


def _claims(wire_id: str, state: TaskState, cost: CostNode | None, budget: Budget | None,
            trace_id: str, at: str, digest: str | None = None) -> dict[str, Any]:
    """The claims a compact receipt shared with its task, as ``receipts.seal`` signed
    them; ``digest`` None for a schema 4 row, which kept it with the receipt."""
    claims: dict[str, Any] = {
        "task_id": wire_id,
        "state": state.value,
        "cost_usd": str(cost.cost_usd) if cost is not None else "0",
        "total_usd": str(cost.total_usd) if cost is not None else "0",
        "spent_usd": str(budget.spent_usd) if budget is not None else "0",
        "budget_left_usd": str(budget.left_usd) if budget is not None else "0",
        "trace_id": trace_id,
        "children": [],
        "at": at,
    }
    if digest is not None:
        claims["digest"] = digest
    return claims


def _canonical(claims: dict[str, Any]) -> bytes:
    """RFC 8785 of ``claims``, as those releases spelled it out for text values."""
    out = []
    for key in sorted(claims):
        value = claims[key]
        if type(value) is str:
            text = encode_basestring(value)
        elif type(value) is list and all(type(v) is str for v in value):
            text = "[" + ",".join(map(encode_basestring, value)) + "]"
        else:
            return canonical(claims)
        if not key.isascii():
            return canonical(claims)
        out.append(f"{encode_basestring(key)}:{text}")
    return ("{" + ",".join(out) + "}").encode()


def _unpacked(packed: bytes, size: int) -> tuple[str, str, str]:
    """(receipt id hex, signature, digest or "")."""
    if len(packed) != size:
        raise ValueError("a task row's receipt fields are cut short")
    if size == _PACKED:
        return packed[:16].hex(), b64url(packed[16:]), ""
    return packed[:16].hex(), b64url(packed[48:]), b64url(packed[16:48])


def _request(value: list[Any], task_skill: str | None = None) -> TaskRequest:
    f = list(value) + [None] * (9 - len(value))
    return TaskRequest(
        text=f[0] or "", skill=task_skill if f[1] == 1 and task_skill else f[1],
        capabilities_needed=tuple(f[2] or ()),
        blocking=f[3] is None, id=f[4], context_id=f[5],
        input=exact_json.plain_numbers(f[6]) if f[6] else {}, parts=_parts(f[7]),
        timeout_seconds=None if f[8] is None else float(f[8]),
    )


def _time(value: Any, base: int | None, *, negate: bool = False) -> str:
    """A stored time: an offset (from ``base``) or text kept as it was."""
    if isinstance(value, str) or base is None:
        return str(value)
    return micros_stamp(base - value if negate else base + value)


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


def _cost(value: list[Any], skill: str | None = None,
          state: TaskState | None = None) -> CostNode:
    """A stored cost node; a compact task's own given its skill and state (``0``)."""
    return CostNode(
        agent=value[0], skill=skill if value[1] == 0 and skill is not None else value[1],
        cost_usd=Decimal(value[2]), duration_ms=value[3],
        status=state.value if value[4] == 0 and state is not None else value[4],
        children=tuple(_cost(c) for c in value[5]) if len(value) > 5 else ())


def _message(value: list[Any]) -> Message:
    fields = list(value) + [None] * (9 - len(value))
    return Message(
        message_id=fields[0], role=fields[1], parts=_parts(fields[2]),
        context_id=fields[3] or "", task_id=fields[4] or "", metadata=fields[5],
        extensions=tuple(fields[6] or ()), reference_task_ids=tuple(fields[7] or ()),
        at=fields[8] or "",
    )

