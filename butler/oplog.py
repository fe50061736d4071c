"""The operator's log: what ``butler serve`` says while it works.

At info, one line per finished task and one per refusal, read off the audit records the
daemon writes anyway (``Daemon._record``), so a task is logged exactly when it is audited:
once. At debug, one access line per request. Lines name callers by identity; the token
never reaches this module.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

tasks_log = logging.getLogger("butler.tasks")
access_log = logging.getLogger("butler.access")


def log_audit(kind: str, fields: dict[str, Any]) -> None:
    if kind == "task_finished":
        if tasks_log.isEnabledFor(logging.INFO):
            _finished(fields)
    elif kind == "refusal" and tasks_log.isEnabledFor(logging.INFO):
        tasks_log.info("task refused", extra={"trace_id": fields.get("trace_id") or "", "kv": {
            "code": str(fields.get("code")), "caller": str(fields.get("caller", "")),
            "depth": str(len(fields.get("chain") or ())),
            **({"task_id": str(fields["task_id"])} if fields.get("task_id") else {}),
        }})


def _finished(fields: dict[str, Any]) -> None:
    detail = fields.get("detail") or {}
    kv = {"task_id": str(fields.get("task_id")), "state": str(fields.get("decision"))}
    if fields.get("code"):
        kv["code"] = str(fields["code"])
    if detail.get("skill"):
        kv["skill"] = str(detail["skill"])
    if detail.get("peer"):
        kv["peer"] = str(detail["peer"])
    if "seconds" in detail:
        kv["duration_ms"] = f"{float(detail['seconds']) * 1000:.1f}"
    before, after = fields.get("budget_before"), fields.get("budget_after")
    if isinstance(before, Decimal) and isinstance(after, Decimal):
        kv["cost_usd"] = str(before - after)
    kv["caller"] = str(fields.get("caller", ""))
    tasks_log.info("task finished", extra={"trace_id": fields.get("trace_id") or "", "kv": kv})


def log_request(method: str, path: str, status: int, seconds: float, caller: str) -> None:
    """``path`` without its query; ``caller`` the identity's name ("" before auth)."""
    if access_log.isEnabledFor(logging.DEBUG):
        access_log.debug("request", extra={"kv": {
            "method": method, "path": path, "status": str(status),
            "duration_ms": f"{seconds * 1000:.1f}", "caller": caller or "-"}})
