"""Stored audit rows read back as records, each column checked to be exactly what an
append writes, so a tampered row fails here instead of reading as something else."""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal, InvalidOperation
from typing import Any

from butler.audit.record import AuditRecord
from butler.audit.schema import COLUMNS, GENESIS_HASH
from internal.protocol.a2a.model import SetupError
from internal.signing import canonical


class AuditError(SetupError):
    """The stored log is malformed (tampered with), so it cannot be read or extended."""

    def __init__(self, message: str) -> None:
        super().__init__("audit_log_damaged", message)


def live_base(conn: sqlite3.Connection) -> tuple[int, str]:
    """(seq, hash) the live log continues from: the last dropped segment's last record,
    or (0, genesis)."""
    row = conn.execute("SELECT last_seq, last_hash FROM audit_segments WHERE dropped = 1 "
                       "ORDER BY last_seq DESC LIMIT 1").fetchone()
    return (0, GENESIS_HASH) if row is None else (row[0], row[1])


def hash_before(conn: sqlite3.Connection, seq: int) -> str:
    """The hash record ``seq`` links to: its predecessor's, or a dropped segment's sealed
    hash; "" when there is neither."""
    base, base_hash = live_base(conn)
    if seq - 1 <= base:
        return base_hash if seq - 1 == base else ""
    row = conn.execute("SELECT hash FROM audit WHERE seq = ?", (seq - 1,)).fetchone()
    return row[0] if row is not None and isinstance(row[0], str) else ""


def records_after(conn: sqlite3.Connection, after: int, limit: int) -> list[AuditRecord]:
    after = max(after, live_base(conn)[0])  # not a dropped segment's leftovers
    rows = conn.execute(f"SELECT {COLUMNS} FROM audit WHERE seq > ? ORDER BY seq LIMIT ?",
                        (after, limit)).fetchall()
    return [record_from_row(row) for row in rows]


def tail_records(conn: sqlite3.Connection, n: int) -> list[AuditRecord]:
    rows = conn.execute(f"SELECT {COLUMNS} FROM audit WHERE seq > ? ORDER BY seq DESC "
                        "LIMIT ?", (live_base(conn)[0], n)).fetchall()
    return [record_from_row(row) for row in reversed(rows)]


def read_head(conn: sqlite3.Connection) -> tuple[int, str] | None:
    row = conn.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
    if row is None:
        return None
    seq, digest = row
    if not isinstance(seq, int) or not isinstance(digest, str):
        raise AuditError("audit_head is malformed")
    return seq, digest


def record_from_row(row: tuple[Any, ...]) -> AuditRecord:
    """Parse a stored row, rejecting anything append() could not have written.

    Strictness matters where a field is hashed from its parsed value: if "1E+2" were
    accepted as a budget, or a chain with extra whitespace, an edit could re-encode to
    the original hashed bytes. The detail is hashed as the text it is stored as.
    """
    (seq, at, kind, caller, task_id, chain_text, before, after) = row[:8]
    (decision, code, trace_id, detail_text, prev_hash, digest) = row[8:]
    chain = _stored_json("chain", chain_text)
    if not isinstance(chain, list) or not all(isinstance(hop, str) for hop in chain):
        raise AuditError("chain is not a JSON list of strings")
    if canonical(chain).decode() != chain_text:
        raise AuditError("chain is not in canonical form")
    detail = _stored_json("detail", detail_text)
    if not isinstance(detail, dict):
        raise AuditError("detail is not a JSON object")
    if not isinstance(seq, int):
        raise AuditError("seq is not an integer")
    return AuditRecord(
        seq=seq,
        at=_stored_str("at", at),
        kind=_stored_str("kind", kind),
        caller=_stored_str("caller", caller),
        task_id=_stored_opt_str("task_id", task_id),
        chain=tuple(chain),
        budget_before=_stored_budget("budget_before", before),
        budget_after=_stored_budget("budget_after", after),
        decision=_stored_str("decision", decision),
        code=_stored_opt_str("code", code),
        trace_id=_stored_opt_str("trace_id", trace_id),
        detail=detail,
        prev_hash=_stored_str("prev_hash", prev_hash),
        hash=_stored_str("hash", digest),
        detail_text=detail_text,
    )


def _stored_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise AuditError(f"{name} is not text")
    return value


def _stored_opt_str(name: str, value: object) -> str | None:
    return None if value is None else _stored_str(name, value)


def _stored_json(name: str, value: object) -> Any:
    try:
        return json.loads(_stored_str(name, value))
    except (ValueError, RecursionError) as exc:
        raise AuditError(f"{name} is not valid JSON") from exc


def _stored_budget(name: str, value: object) -> Decimal | None:
    if value is None:
        return None
    text = _stored_str(name, value)
    try:
        amount = Decimal(text)
    except InvalidOperation as exc:
        raise AuditError(f"{name} is not a decimal") from exc
    if not amount.is_finite() or str(amount) != text:
        raise AuditError(f"{name} is not in canonical form")
    return amount
