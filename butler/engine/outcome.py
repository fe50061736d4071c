"""What a task's final audit record says beyond its columns: the skill that ran it, the
peers it delegated to, and how long it took. The operator's log line and the duration
histograms read it from there (``butler.telemetry.task_log.log_audit``,
``butler.metrics.observe_audit``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from butler.identity.receipts import receipt_id
from internal.protocol.a2a.model import Task


def final_record(task: Task, at: datetime | None = None, receipt: str = "") -> dict[str, Any]:
    """The fields of a task's ``task_finished`` record; ``at``: when it ended, for a
    record written later (start-up recovery), else now; ``receipt``: the id of the
    receipt it was just sealed with, if it was (else read from the receipt)."""
    budget = task.budget
    return {**({} if at is None else {"at": at}), "caller": task.owner, "task_id": task.id,
            "chain": task.chain, "budget_before": budget.start_usd if budget else None,
            "budget_after": budget.left_usd if budget else None,
            "decision": task.state.value, "code": task.error.code if task.error else None,
            "trace_id": task.trace_id, "detail": final_detail(task, receipt)}


def final_detail(task: Task, receipt: str = "") -> dict[str, str]:
    # Strings only: the audit writer spells such a detail out without a JSON round trip.
    detail = {"seconds": f"{_seconds(task.created_at, task.updated_at):.6f}"}
    if task.skill:
        detail["skill"] = task.skill
    if task.cost is not None:
        # A plan's model calls and local tools are children too, of this agent itself.
        peers = dict.fromkeys(c.agent for c in task.cost.children if c.agent != task.cost.agent)
        if peers:
            detail["peer"] = ",".join(peers)
    if task.receipts:  # the audit trail names the signed receipt stored with the task
        detail["receipt"] = receipt or receipt_id(task.receipts[0])
    return detail


def _seconds(start: str, end: str) -> float:
    try:
        took = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:  # a stored time we cannot read: say nothing rather than fail the end
        return 0.0
    return max(took, 0.0)
