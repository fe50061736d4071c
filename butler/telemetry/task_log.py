"""The task lines of the log (logger ``butler.tasks``): one when a task starts, one when
it ends, one per refusal, each with its trace id (docs/operations.md, "Logs"). The start
line comes from the engine; the others from the audit records, so they say what the audit
trail says."""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

tasks_log = logging.getLogger("butler.tasks")


def log_audit(kind: str, fields: dict[str, Any]) -> None:
    if kind == "task_finished":
        if tasks_log.isEnabledFor(logging.INFO):
            _finished(fields)
    elif kind == "refusal" and tasks_log.isEnabledFor(logging.INFO):
        tasks_log.info("task refused", extra={"trace_id": fields.get("trace_id") or "", "kv": {
            "code": str(fields.get("code")), "caller": str(fields.get("caller", "")),
            "depth": len(fields.get("chain") or ()),
            **({"task_id": str(fields["task_id"])} if fields.get("task_id") else {}),
        }})


def log_task_started(task_id: str, caller: str, skill: str, peer: str | None,
                     trace_id: str) -> None:
    """A task accepted and about to run (its ``task finished`` line comes when it ends):
    long work is visible while it runs. ``peer``: the first peer a delegation goes to."""
    if tasks_log.isEnabledFor(logging.INFO):
        kv = {"task_id": task_id, "skill": skill or "-", **({"peer": peer} if peer else {}),
              "caller": caller}
        tasks_log.info("task started", extra={"trace_id": trace_id, "kv": kv})


def _finished(fields: dict[str, Any]) -> None:
    detail = fields.get("detail") or {}
    kv: dict[str, Any] = {"task_id": str(fields.get("task_id")),
                          "state": str(fields.get("decision"))}
    if fields.get("code"):
        kv["code"] = str(fields["code"])
    if detail.get("skill"):
        kv["skill"] = str(detail["skill"])
    if detail.get("peer"):
        kv["peer"] = str(detail["peer"])
    if "seconds" in detail:
        kv["duration_ms"] = round(float(detail["seconds"]) * 1000, 1)
    before, after = fields.get("budget_before"), fields.get("budget_after")
    if isinstance(before, Decimal) and isinstance(after, Decimal):
        kv["cost_usd"] = before - after
    kv["caller"] = str(fields.get("caller", ""))
    tasks_log.info("task finished", extra={"trace_id": fields.get("trace_id") or "", "kv": kv})
