"""Task ids as callers know them.

A caller may choose its task's id, which is then its idempotency key. Ids are scoped per
caller: when a caller chooses an id another caller's task already has, its task is kept
under a scoped id (``scoped_task_id``), and every binding shows it by the caller's id
(``Task.wire_id``). Each caller finds only its own task by that id, and nobody learns
that another caller used it (docs/tasks.md#idempotency).
"""

from __future__ import annotations

from collections.abc import Mapping

from butler.engine.store import TaskStore
from internal.protocol.a2a.model import SCOPE_MARK, Identity, Task, scoped_task_id


async def lookup(caller: Identity, task_id: str, live: Mapping[str, Task],
                 store: TaskStore) -> tuple[Task | None, Task | None]:
    """(the caller's own task it knows as ``task_id``, another caller's task stored under
    that very id)."""
    plain = live.get(task_id) or await store.get(task_id)
    if plain is not None and plain.owner == caller.name:
        return plain, None
    if SCOPE_MARK in task_id:  # a stored id, not one a caller chose
        return None, plain
    # Looked for even without a plain one: the other caller's task may have been purged
    # while this caller's still answers repeats of its id.
    scoped = scoped_task_id(task_id, caller.name)
    return live.get(scoped) or await store.get(scoped), plain
