"""Stored audit rows read back as records: each given the hash of the record before it
(stored once, by position: ``schema``) and its own (whole, or chained on from the
nearest whole one: ``compact``), its columns checked to be exactly what an append
writes, so a tampered row fails here instead of reading as something else."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Any

from butler.audit.compact import ANCHOR_EVERY, Names, detail_text, is_check
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


def hash_before(conn: sqlite3.Connection, seq: int, names: Names | None = None) -> str:
    """The hash record ``seq`` links to: its predecessor's (chained on from the nearest
    record that keeps its whole hash, or from a dropped segment's)."""
    base, base_hash = live_base(conn)
    if seq - 1 <= base:
        return base_hash if seq - 1 == base else ""
    names = names or Names(conn)
    rows: list[Any] = []
    low = seq
    while low - 1 > base:  # back to a whole hash: within ANCHOR_EVERY rows, unless edited
        page = conn.execute(f"SELECT {COLUMNS} FROM audit WHERE seq < ? AND seq > ? "
                            "ORDER BY seq DESC LIMIT ?", (low, base, ANCHOR_EVERY)).fetchall()
        if not page:
            break
        rows += page
        low = page[-1][0]
        if any(not is_check(row[13]) for row in page):
            break
    rows.reverse()
    start = next((i for i in range(len(rows) - 1, -1, -1) if not is_check(rows[i][13])), None)
    if start is None:
        if not rows or rows[0][0] != base + 1:
            return ""
        prev = base_hash
    else:
        prev = str(read_hash(rows[start][13]))
        rows = rows[start + 1:]
    for row in rows:
        prev = record_from_row(row, prev, names).hash
    return prev


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
    names = Names(conn)
    prev = hash_before(conn, rows[0][0], names) if rows else ""
    for row in rows:
        records.append(record_from_row(row, prev, names))
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


def record_from_row(row: tuple[Any, ...], prev: str, names: Names) -> AuditRecord:
    """Parse a stored row, rejecting anything append() could not have written. A row
    that keeps only its hash's first bytes is given the hash its fields chain to:
    ``verify`` compares the two (``compact.hash_matches``).

    Strictness matters: if e.g. "1E+2" were accepted as "1e2" or a JSON column with extra
    whitespace were normalised, an edit could re-encode to the original hashed bytes.
    """
    (seq, at, kind, caller, task_id, chain_text, before, after) = row[:8]
    (decision, code, trace_id, stored_detail, prev_hash, digest) = row[8:]
    at, task_id, trace_id = read_at(at), read_hash(task_id), read_hash(trace_id)
    kind, caller, decision = names.name(kind), names.name(caller), names.name(decision)
    digest = None if is_check(digest) else read_hash(digest)
    prev_hash = prev if prev_hash is None else prev_hash
    if chain_text is None:  # stored once: the chain is just the caller
        chain_text = caller_chain(caller)
    chain = _stored_json("chain", chain_text)
    if not isinstance(chain, list) or not all(isinstance(hop, str) for hop in chain):
        raise AuditError("chain is not a JSON list of strings")
    detail_json = detail_text(stored_detail, names.by_ref)
    if detail_json is None:
        raise AuditError("detail is not stored as an append stores it")
    detail = _stored_json("detail", detail_json)
    if not isinstance(detail, dict):
        raise AuditError("detail is not a JSON object")
    if not isinstance(seq, int):
        raise AuditError("seq is not an integer")
    record = AuditRecord(
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
        hash="" if digest is None else _stored_str("hash", digest),
    )
    return record if digest is not None else replace(record, hash=record.compute_hash())


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
