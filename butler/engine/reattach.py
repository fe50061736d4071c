"""A delegation survives a restart of its delegating daemon (docs/delegation.md#restarts).

A task that was delegating when the daemon died has its peer's task kept with it
(``Task.peer_task``: peer, task id, context id, binding). At the next start its run is
made again, and follows the peer's task (``GetTask`` every poll interval) instead of
sending anything: it ends with the peer's outcome, and relays the peer's questions as
the first run did. Only when the peer no longer knows the task does it fail
(``peer_task_lost``). Every other task the restart cut off ends ``interrupted_by_restart``
(``recovery``).
"""

from __future__ import annotations

from datetime import UTC, datetime

from butler.swarm.decision import DELEGATE_SKILL, Admitted, SwarmPolicy
from internal.protocol.a2a.model import Identity, Task


def reattachable(task: Task) -> bool:
    """A task whose own work was a delegation whose peer's task is known."""
    return task.peer_task is not None and task.skill == DELEGATE_SKILL


def admitted_again(task: Task, policy: SwarmPolicy) -> Admitted:
    """What the task was admitted with, as far as it was kept: its chain and budget."""
    assert task.peer_task is not None
    start = task.budget.start_usd if task.budget is not None else policy.budget_cap_usd
    return Admitted(chain=task.chain, budget_usd=start,
                    may_delegate=policy.can_delegate(task.chain),
                    tree_id=task.peer_task.tree_id)


def owner_of(task: Task) -> Identity:
    """The caller, by the name its task is kept under (its tier is not kept: the run
    needs only the name)."""
    return Identity(task.owner)


def time_left(task: Task, limit: float) -> float:
    """What is left of the task's time limit ``limit`` since it was created (at least a
    millisecond: a task past its limit then fails ``task_timeout`` at once)."""
    try:
        created = datetime.fromisoformat(task.created_at.replace("Z", "+00:00"))
    except ValueError:
        return limit
    spent = datetime.now(UTC).timestamp() - created.timestamp()
    return max(limit - spent, 0.001) if spent >= 0 else limit

