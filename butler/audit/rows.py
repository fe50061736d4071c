"""Stored audit rows read back as records: each given the hash of the record before it
(stored once, by position: ``schema``), its columns checked to be exactly what an
append writes, so a tampered row fails here instead of reading as something else."""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal, InvalidOperation
from typing import Any

from butler.audit.record import AuditRecord, canonical
from butler.audit.schema import COLUMNS, GENESIS_HASH, caller_chain, read_at, read_hash
from internal.protocol.a2a.model import SetupError


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
    """The hash record ``seq`` links to: its predecessor's, or a dropped segment's."""
    row = conn.execute("SELECT hash FROM audit WHERE seq = ?", (seq - 1,)).fetchone()
    if row is not None:
        digest = read_hash(row[0])
        return digest if isinstance(digest, str) else ""
    base, base_hash = live_base(conn)
    return base_hash if seq - 1 == base else ""


def records_after(conn: sqlite3.Connection, after: int, limit: int) -> list[AuditRecord]:
    after = max(after, live_base(conn)[0])  # not a dropped segment's leftovers
    rows = conn.execute(f"SELECT {COLUMNS} FROM audit WHERE seq > ? ORDER BY seq LIMIT ?",
                        (after, limit)).fetchall()
    return _chained(conn, rows)


def tail_records(conn: sqlite3.Connection, n: int) -> list[AuditRecord]:
    rows = conn.execute(f"SELECT {COLUMNS} FROM audit WHERE seq > ? ORDER BY seq DESC "
                        "LIMIT ?", (live_base(conn)[0], n)).fetchall()
    return _chained(conn, rows[::-1])


def _chained(conn: sqlite3.Connection, rows: list[Any]) -> list[AuditRecord]:
    """Records of consecutive rows, each given the hash of the one before it."""
    records: list[AuditRecord] = []
    prev = hash_before(conn, rows[0][0]) if rows else ""
    for row in rows:
        records.append(record_from_row(row, prev))
        prev = records[-1].hash
    return records


def read_head(conn: sqlite3.Connection) -> tuple[int, str] | None:
    row = conn.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
    if row is None:
        return None
    seq, digest = row
    if not isinstance(seq, int) or not isinstance(digest, str):
        raise AuditError("audit_head is malformed")
    return seq, digest


def record_from_row(row: tuple[Any, ...], prev: str) -> AuditRecord:
    """Parse a stored row, rejecting anything append() could not have written.

    Strictness matters: if e.g. "1E+2" were accepted as "1e2" or a JSON column with extra
    whitespace were normalised, an edit could re-encode to the original hashed bytes.
    """
    (seq, at, kind, caller, task_id, chain_text, before, after) = row[:8]
    (decision, code, trace_id, detail_text, prev_hash, digest) = row[8:]
    at, digest, task_id = read_at(at), read_hash(digest), read_hash(task_id)
    trace_id = read_hash(trace_id)
    prev_hash = prev if prev_hash is None else prev_hash
    if chain_text is None:  # stored once: the chain is just the caller
        chain_text = caller_chain(caller)
    chain = _stored_json("chain", chain_text)
    if not isinstance(chain, list) or not all(isinstance(hop, str) for hop in chain):
        raise AuditError("chain is not a JSON list of strings")
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
    )


def _stored_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise AuditError(f"{name} is not text")
    return value


def _stored_opt_str(name: str, value: object) -> str | None:
    return None if value is None else _stored_str(name, value)


def _stored_json(name: str, value: object) -> Any:
    text = _stored_str(name, value)
    try:
        loaded = json.loads(text)
        again = canonical(loaded)
    except (ValueError, RecursionError) as exc:
        raise AuditError(f"{name} is not valid JSON") from exc
    if again != text:
        raise AuditError(f"{name} is not in canonical form")
    return loaded


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
