"""Audit rows as docs/audit.md documents them, read from the file with plain sqlite3:
``at``, ``hash`` and the ids back in text form, ``prev_hash`` filled in where it is stored
once, numbered names looked up, a compact detail spelled out, a hash kept as its first
bytes recomputed (and checked against them)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any

from butler.audit import AuditLog, AuditRecord
from butler.audit.log import GENESIS_HASH
from butler.audit.schema import caller_chain, read_at, read_hash


def documented_rows(path: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        rows = [dict(r) for r in conn.execute("SELECT * FROM audit ORDER BY seq")]
        names = dict(conn.execute("SELECT ref, name FROM audit_names").fetchall())
    finally:
        conn.close()
    prev = GENESIS_HASH
    for row in rows:
        for column in ("kind", "caller", "decision"):
            if isinstance(row[column], bytes):
                row[column] = names[int.from_bytes(row[column], "big")]
        row["at"], row["hash"] = read_at(row["at"]), read_hash(row["hash"])
        row["task_id"], row["trace_id"] = read_hash(row["task_id"]), read_hash(row["trace_id"])
        row["detail"] = _detail(row["detail"], names)
        if row["chain"] is None:
            row["chain"] = caller_chain(row["caller"])
        if row["prev_hash"] is None:
            row["prev_hash"] = prev
        if len(row["hash"]) == 8:  # only its first four bytes are kept
            check, row["hash"] = row["hash"], documented_hash(row)
            assert row["hash"].startswith(check)
        prev = row["hash"]
    return rows


def _detail(stored: Any, names: dict[int, str]) -> str:
    if not isinstance(stored, bytes):
        return str(stored)
    if not stored:
        return "{}"
    array, _, tail = stored.partition(b"\x00")
    shape, *values = json.loads(array)
    detail = {}
    for key, value in zip(json.loads(names[shape]), values, strict=True):
        if value is None:
            value, tail = "r-" + tail[:16].hex(), tail[16:]
        elif isinstance(value, int):
            value = f"{value // 10**6}.{value % 10**6:06d}"
        detail[key] = value
    return json.dumps(detail, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def documented_hash(row: dict[str, Any]) -> str:
    """The hash as docs/audit.md specifies it, computed independently of the module."""
    payload = {k: v for k, v in row.items() if k != "hash"}
    payload["chain"] = json.loads(payload["chain"])
    payload["detail"] = json.loads(payload["detail"])
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def append_record(log: AuditLog, i: int = 0, **overrides: Any) -> AuditRecord:
    """The ``i``-th of a run of plausible inbound records, with ``overrides``."""
    fields: dict[str, Any] = {
        "caller": f"agent-{i}",
        "task_id": f"task-{i}",
        "chain": ["origin", f"agent-{i}"],
        "budget_before": Decimal("10.00"),
        "budget_after": Decimal("7.25"),
        "decision": "accept",
        "code": None,
        "trace_id": f"{i:032x}",
        "detail": {"skill": "memory.search", "n": i},
    }
    fields.update(overrides)
    kind = fields.pop("kind", "inbound")
    return log.append(kind, **fields)


def fill_log(log: AuditLog, n: int) -> list[AuditRecord]:
    return [append_record(log, i) for i in range(n)]
