"""Audit rows as docs/audit.md documents them, read from the file with plain sqlite3."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any

from butler.audit import AuditLog, AuditRecord
from butler.daemon import Daemon


def documented_rows(path: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM audit ORDER BY seq")]
    finally:
        conn.close()


def documented_hash(row: dict[str, Any]) -> str:
    """The hash as docs/audit.md specifies it, computed independently of the module (for
    the values a test writes, ``json.dumps`` so spelled gives the RFC 8785 form)."""
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


async def audit_records(daemon: Daemon, kind: str) -> list[AuditRecord]:
    """The records of ``kind`` in a stopped daemon's audit trail."""
    def read() -> list[AuditRecord]:
        with AuditLog(daemon.config.data_dir / "audit.db") as log:
            return [r for r in log.iter_all() if r.kind == kind]

    return await asyncio.to_thread(read)
