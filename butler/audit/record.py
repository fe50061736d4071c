"""One audit record: its fields, how they are checked and stored, and its hash.

The hash is SHA-256 of the record's canonical JSON (sorted keys, no spaces, non-ASCII
as is), previous hash included; ``_digest`` spells that text out directly, byte for
byte, because every task appends two records (docs/audit.md, docs/performance.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any


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

    def to_json(self) -> dict[str, Any]:
        out = self._payload()
        out["detail"] = json.loads(canonical(self.detail))  # a copy the caller may mutate
        out["hash"] = self.hash
        return out

    def compute_hash(self) -> str:
        """The hash this record should carry given its other fields."""
        return _digest(self.seq, self.at, self.kind, self.caller, self.task_id,
                       canonical(list(self.chain)), _dec_text(self.budget_before),
                       _dec_text(self.budget_after), self.decision, self.code,
                       self.trace_id, canonical(self.detail), self.prev_hash)

    def _payload(self) -> dict[str, Any]:
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


def canonical(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _digest(seq: int, at: str, kind: str, caller: str, task_id: str | None,
            chain_text: str, before: str | None, after: str | None, decision: str,
            code: str | None, trace_id: str | None, detail_text: str, prev_hash: str) -> str:
    """SHA-256 of ``canonical(payload)``, spelled out: the keys in sorted order, each
    string escaped by the function ``json.dumps`` itself uses, chain and detail already
    canonical. Byte for byte the documented encoding, without building the payload."""
    text = (
        f'{{"at":{encode_basestring(at)},"budget_after":{_json_opt(after)},'
        f'"budget_before":{_json_opt(before)},"caller":{encode_basestring(caller)},'
        f'"chain":{chain_text},"code":{_json_opt(code)},'
        f'"decision":{encode_basestring(decision)},"detail":{detail_text},'
        f'"kind":{encode_basestring(kind)},"prev_hash":{encode_basestring(prev_hash)},'
        f'"seq":{seq:d},"task_id":{_json_opt(task_id)},"trace_id":{_json_opt(trace_id)}}}'
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _json_opt(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


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


def _normalize_detail(detail: Mapping[str, Any] | None) -> dict[str, Any]:
    # Store what JSON round-trips to, so the record returned now equals the one read back.
    encoded = json.dumps(
        dict(detail or {}),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_detail_default,
    )
    loaded = json.loads(_clean(encoded))
    assert isinstance(loaded, dict)
    return loaded


def _plain(detail: Mapping[str, Any]) -> bool:
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
        "chain_text",
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
        self.chain_text = "[" + ",".join(map(encode_basestring, self.chain)) + "]"
        self.budget_before = _budget("budget_before", budget_before)
        self.budget_after = _budget("budget_after", budget_after)
        self.decision = _text("decision", decision)
        self.code = _opt_text("code", code)
        self.trace_id = _opt_text("trace_id", trace_id)
        if not detail:
            self.detail, self.detail_text = {}, "{}"
        elif _plain(detail):
            # ASCII strings only (a delegation's peer and url): JSON gives them back as
            # they are, so no round trip, and the canonical text is spelled out directly.
            self.detail = dict(detail)
            self.detail_text = "{" + ",".join(
                f"{encode_basestring(k)}:{encode_basestring(v)}"
                for k, v in sorted(self.detail.items())) + "}"
        else:
            self.detail = _normalize_detail(detail)
            self.detail_text = canonical(self.detail) if self.detail else "{}"

    def row(self, seq: int, at: str, prev_hash: str) -> Row:
        """The stored row, in ``_COLUMNS`` order, hash last."""
        before, after = _dec_text(self.budget_before), _dec_text(self.budget_after)
        digest = _digest(seq, at, self.kind, self.caller, self.task_id, self.chain_text,
                         before, after, self.decision, self.code, self.trace_id,
                         self.detail_text, prev_hash)
        return (seq, at, self.kind, self.caller, self.task_id, self.chain_text, before,
                after, self.decision, self.code, self.trace_id, self.detail_text, prev_hash,
                digest)

    def record(self, row: Row) -> AuditRecord:
        return AuditRecord(
            seq=row[0], at=row[1], kind=self.kind, caller=self.caller, task_id=self.task_id,
            chain=self.chain, budget_before=self.budget_before,
            budget_after=self.budget_after, decision=self.decision, code=self.code,
            trace_id=self.trace_id, detail=self.detail, prev_hash=row[12], hash=row[13],
        )
