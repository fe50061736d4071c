"""One audit record: its fields, how they are checked, and its hash.

The hash is SHA-256 of the record's RFC 8785 form (``internal.signing.canonical``:
sorted keys, no spaces, non-ASCII as is), previous hash included
(docs/audit.md#how-the-chain-works).
A stored record's detail is hashed as the text it is stored as, which is the text it was
hashed as when it was appended.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from internal.signing import Encoded, canonical


@dataclass(frozen=True, slots=True)
class AuditRecord:
    seq: int
    at: str
    kind: str
    caller: str
    task_id: str | None
    chain: tuple[str, ...]
    budget_before: Decimal | None
    budget_after: Decimal | None
    decision: str
    code: str | None
    trace_id: str | None
    detail: dict[str, Any]
    prev_hash: str
    hash: str
    # The detail as stored, hashed as it is: a record appended by an older Butler was
    # hashed with the detail as ``json.dumps`` wrote it (a float as ``1.0``, an integer
    # past 2**53), which no RFC 8785 encoding of the parsed value gives back.
    detail_text: str = field(default="", repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        out = self.payload()
        out["detail"] = json.loads(self.detail_text or canonical(self.detail))  # a copy
        out["hash"] = self.hash
        return out

    def compute_hash(self) -> str:
        """The hash this record should carry given its other fields."""
        payload = self.payload()
        if self.detail_text:
            payload["detail"] = Encoded(self.detail_text)
        return digest(payload)

    def payload(self) -> dict[str, Any]:
        """The hashed fields, as JSON values."""
        return {
            "seq": self.seq,
            "at": self.at,
            "kind": self.kind,
            "caller": self.caller,
            "task_id": self.task_id,
            "chain": list(self.chain),
            "budget_before": _dec_text(self.budget_before),
            "budget_after": _dec_text(self.budget_after),
            "decision": self.decision,
            "code": self.code,
            "trace_id": self.trace_id,
            "detail": self.detail,
            "prev_hash": self.prev_hash,
        }


def digest(payload: Mapping[str, Any]) -> str:
    """The lowercase hex SHA-256 of ``payload``'s canonical form."""
    return hashlib.sha256(canonical(payload)).hexdigest()


def _detail_default(value: object) -> str:
    # Amounts are Decimals throughout the daemon; keep them exact as strings, never floats.
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"detail values must be JSON types or Decimal, not {type(value).__name__}")


def decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _clean(value: str) -> str:
    # Lone surrogates (e.g. from a peer's JSON "\ud800") cannot be UTF-8 encoded, so
    # they would make hashing or the INSERT fail; record them as "?" instead.
    return value.encode("utf-8", "replace").decode("utf-8")


def _text(name: str, value: object) -> str:
    if type(value) is str and value.isascii():
        return value  # nothing to clean, and the common case
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return _clean(value)


def _opt_text(name: str, value: object) -> str | None:
    return None if value is None else _text(name, value)


def _budget(name: str, value: object) -> Decimal | None:
    if value is None:
        return None
    if not isinstance(value, Decimal):
        raise TypeError(f"{name} must be a Decimal or None, not {type(value).__name__}")
    if not value.is_finite():
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def _dec_text(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def _normalize_detail(detail: Mapping[str, Any]) -> dict[str, Any]:
    # Store what JSON round-trips to, so the record returned now equals the one read back.
    encoded = json.dumps(_hashable_numbers(dict(detail)), ensure_ascii=False,
                         allow_nan=False, default=_detail_default)
    loaded = json.loads(_clean(encoded))
    assert isinstance(loaded, dict)
    return loaded


def _hashable_numbers(value: Any) -> Any:
    """``value`` with each integer past 2**53, which RFC 8785 has no exact form for,
    written as its digits: a peer's or a model's big count is recorded, never the reason
    a record is lost. (NaN is refused as before: no JSON reading makes one.)"""
    if type(value) is int and abs(value) >= 2**53:
        return str(value)
    if isinstance(value, dict):
        return {k: _hashable_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_hashable_numbers(v) for v in value]
    return value


def _plain(detail: Mapping[str, Any]) -> bool:
    """Whether JSON gives ``detail`` back as it is (ASCII text only: a final record's)."""
    return all(type(k) is str and type(v) is str and k.isascii() and v.isascii()
               for k, v in detail.items())


Row = tuple[Any, ...]


class Entry:
    """One record's fields, checked and in stored form, waiting for its seq and time."""

    __slots__ = (
        "budget_after",
        "budget_before",
        "caller",
        "chain",
        "code",
        "decision",
        "detail",
        "detail_text",
        "kind",
        "task_id",
        "trace_id",
    )

    def __init__(
        self,
        *,
        kind: str,
        caller: str,
        task_id: str | None,
        chain: Sequence[str],
        budget_before: Decimal | None,
        budget_after: Decimal | None,
        decision: str,
        code: str | None = None,
        trace_id: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(chain, str):
            raise TypeError("chain must be a sequence of identities, not a single str")
        self.kind = _text("kind", kind)
        self.caller = _text("caller", caller)
        self.task_id = _opt_text("task_id", task_id)
        self.chain = tuple([_text("chain item", hop) for hop in chain])
        self.budget_before = _budget("budget_before", budget_before)
        self.budget_after = _budget("budget_after", budget_after)
        self.decision = _text("decision", decision)
        self.code = _opt_text("code", code)
        self.trace_id = _opt_text("trace_id", trace_id)
        self.detail = dict(detail) if detail and _plain(detail) else \
            _normalize_detail(detail) if detail else {}
        self.detail_text = canonical(self.detail).decode()

    def row(self, seq: int, at: str, prev_hash: str) -> Row:
        """The stored row, in ``schema.COLUMNS`` order, hash last."""
        before, after = _dec_text(self.budget_before), _dec_text(self.budget_after)
        chain = list(self.chain)
        payload = {"seq": seq, "at": at, "kind": self.kind, "caller": self.caller,
                   "task_id": self.task_id, "chain": chain, "budget_before": before,
                   "budget_after": after, "decision": self.decision, "code": self.code,
                   "trace_id": self.trace_id, "detail": self.detail, "prev_hash": prev_hash}
        return (seq, at, self.kind, self.caller, self.task_id, canonical(chain).decode(),
                before, after, self.decision, self.code, self.trace_id, self.detail_text,
                prev_hash, digest(payload))

    def record(self, row: Row) -> AuditRecord:
        return AuditRecord(
            seq=row[0], at=row[1], kind=self.kind, caller=self.caller, task_id=self.task_id,
            chain=self.chain, budget_before=self.budget_before,
            budget_after=self.budget_after, decision=self.decision, code=self.code,
            trace_id=self.trace_id, detail=self.detail, prev_hash=row[12], hash=row[13],
            detail_text=self.detail_text,
        )
