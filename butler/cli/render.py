"""Human-readable task output for the CLI."""

from __future__ import annotations

from internal.protocol.a2a.model import CostNode, Task


def print_task_line(task: Task) -> None:
    print(f"{task.id}  {task.state.value:<14} {task.skill:<16} {task.updated_at}")


def print_task(task: Task) -> None:
    print(f"task {task.id}: {task.state.value}  (skill {task.skill or '-'})")
    if task.error is not None:
        print(f"  error: {task.error.code}: {task.error.message}")
    for part in task.parts:
        if part.text is not None:
            print("  result: " + part.text.replace("\n", "\n          "))
    for artifact in task.artifacts:
        print(f"  artifact {artifact.name or artifact.artifact_id}")
    if task.budget is not None:
        print(f"  budget: start {task.budget.start_usd} USD, spent {task.budget.spent_usd}, "
              f"left {task.budget.left_usd}")
    if task.cost is not None:
        print("  hops:")
        _print_cost(task.cost, 2)
    if task.trace_id:
        print(f"  trace id: {task.trace_id}")


def _print_cost(node: CostNode, indent: int) -> None:
    pad = " " * (indent * 2)
    print(f"{pad}{node.agent} / {node.skill}: {node.cost_usd} USD, {node.duration_ms} ms, "
          f"{node.status}")
    for child in node.children:
        _print_cost(child, indent + 1)
