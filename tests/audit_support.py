"""Audit rows as docs/audit.md documents them, read from the file with plain sqlite3:
``at``, ``hash`` and the ids back in text form, ``prev_hash`` filled in where it is stored once."""

from __future__ import annotations

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
    finally:
        conn.close()
    prev = GENESIS_HASH
    for row in rows:
        row["at"], row["hash"] = read_at(row["at"]), read_hash(row["hash"])
        row["task_id"], row["trace_id"] = read_hash(row["task_id"]), read_hash(row["trace_id"])
        if row["chain"] is None:
            row["chain"] = caller_chain(row["caller"])
        if row["prev_hash"] is None:
            row["prev_hash"] = prev
        prev = row["hash"]
    return rows


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
