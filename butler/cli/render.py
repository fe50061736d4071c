"""Human-readable task output for the CLI."""

from __future__ import annotations

import re
from typing import Any

from internal.protocol.a2a.model import CostNode, Task

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(value: Any, limit: int = 200) -> str:
    """Someone else's text (a card's, a peer's error message) as one line of at most
    ``limit`` characters: a control character in it could move the cursor, rewrite the
    terminal or forge a line of our own."""
    text = _CONTROL.sub(" ", str(value)).strip()
    return text if len(text) <= limit else text[:limit - 1] + "…"


def print_task_header(id_width: int) -> None:
    print(f"{'ID':<{id_width}}  {'STATE':<14} {'SKILL':<16} {'UPDATED':<27} SPENT")


def print_task_line(task: Task, id_width: int = 0) -> None:
    budget = task.budget
    spend = f"{budget.spent_usd} of {budget.start_usd} USD" if budget else "-"
    print(f"{task.id:<{id_width}}  {task.state.value:<14} {task.skill:<16} "
          f"{task.updated_at:<27} {spend}")


def print_task(task: Task) -> None:
    print(f"task {task.id}: {task.state.value}  (skill {task.skill or '-'})")
    if task.error is not None:
        print(f"  error: {task.error.code}: {task.error.message}")
    if task.state.interrupted:
        by = f" (asked by {task.asked_by})" if task.asked_by else ""
        print(f"  question: {task.status_message}{by}")
    for part in task.parts:
        if part.text is not None:
            print("  result: " + part.text.replace("\n", "\n          "))
    for artifact in task.artifacts:
        source = f" (from {artifact.source})" if artifact.source else ""
        print(f"  artifact {artifact.name or artifact.artifact_id}{source}")
    if task.budget is not None:
        print(f"  budget: start {task.budget.start_usd} USD, spent {task.budget.spent_usd}, "
              f"left {task.budget.left_usd}")
    if task.cost is not None:
        print("  hops:")
        print("\n".join(cost_lines(task.cost, 2)))
    if task.trace_id:
        print(f"  trace id: {task.trace_id}")


def asked_by(task: dict[str, Any]) -> str:
    """`` (asked by lab)`` for a /v2 task that waits on a question relayed from lab."""
    by = task.get("status", {}).get("asked_by") if isinstance(task.get("status"), dict) else ""
    return f" (asked by {by})" if isinstance(by, str) and by else ""


def cost_lines(node: CostNode, indent: int) -> list[str]:
    """The cost tree, one hop a line, each hop below its caller: agent / skill: cost, time."""
    pad = " " * (indent * 2)
    lines = [f"{pad}{node.agent} / {node.skill}: {node.cost_usd} USD, {node.duration_ms} ms, "
             f"{node.status}"]
    for child in node.children:
        lines += cost_lines(child, indent + 1)
    return lines
