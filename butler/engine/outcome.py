"""What a task's final audit record says beyond its columns: the skill that ran it, the
peers it delegated to, and how long it took. The operator's log line and the duration
histograms read it from there (``butler.telemetry.task_log.log_audit``,
``butler.metrics.observe_audit``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from butler.identity.receipts import Sealed, receipt_leaf
from internal.protocol.a2a.model import Task


def final_record(task: Task, at: datetime | None = None,
                 sealed: Sealed | None = None) -> dict[str, Any]:
    """The fields of a task's ``task_finished`` record; ``at``: when it ended, for a
    record written later (start-up recovery), else now; ``sealed``: how it was just
    sealed, if it was (else its receipt is read)."""
    budget = task.budget
    return {**({} if at is None else {"at": at}), "caller": task.owner, "task_id": task.id,
            "chain": task.chain, "budget_before": budget.start_usd if budget else None,
            "budget_after": budget.left_usd if budget else None,
            "decision": task.state.value, "code": task.error.code if task.error else None,
            "trace_id": task.trace_id, "detail": final_detail(task, sealed)}


def final_detail(task: Task, sealed: Sealed | None = None) -> dict[str, str]:
    # Strings only: the audit writer spells such a detail out without a JSON round trip.
    detail = {"seconds": f"{_seconds(task.created_at, task.updated_at):.6f}"}
    if task.skill:
        detail["skill"] = task.skill
    if task.cost is not None:
        # A plan's model calls and local tools are children too, of this agent itself.
        peers = dict.fromkeys(c.agent for c in task.cost.children if c.agent != task.cost.agent)
        if peers:
            detail["peer"] = ",".join(peers)
    if task.receipts:  # the audit trail names the receipt stored with the task, and its leaf
        rid, leaf = (sealed.receipt_id, sealed.leaf) if sealed and sealed.receipt_id \
            else receipt_leaf(task.receipts[0])
        detail["receipt"] = rid
        if leaf >= 0:
            detail["leaf"] = str(leaf)
    return detail


def _seconds(start: str, end: str) -> float:
    try:
        took = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:  # a stored time we cannot read: say nothing rather than fail the end
        return 0.0
    return max(took, 0.0)
