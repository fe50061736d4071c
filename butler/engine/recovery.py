"""What a start-up repairs after the previous process died (kill -9, OOM, power loss).

Two things can be left half done: tasks still open in the store (they ran when the
process died: they end ``interrupted_by_restart``), and tasks that ended but whose final
audit record was still in the audit writer's batch window (``butler.audit.log.AuditWriter``)
when the process died. A final record is submitted only after the task's terminal state is
committed, so such a task is always terminal in the store; its record is written now,
stamped with the time it ended. Every created task thus gets exactly one final record.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Protocol

from butler.engine.store import TaskStore
from butler.engine.transitions import interrupted
from butler.identity.receipts import Sealed
from butler.runtime.clock import now_iso
from internal.protocol.a2a.model import Task

log = logging.getLogger("butler.engine")

# How far before the audit log's last record a lost final record's task may have ended:
# its terminal state is committed first, then its record is stamped. A commit never takes
# this long; a wall clock stepped back by NTP within it is covered too.
LOOKBACK = timedelta(seconds=60)


class FinalRecords(Protocol):
    """The audit log as recovery sees it."""

    async def last_at(self) -> datetime | None:
        """When the last record's event happened; None for an empty log."""

    async def finished_task_ids(self, since: datetime) -> set[str]:
        """Ids of the tasks with a final record stamped at or after ``since``."""


# (task, when it ended, None: now; how it was just sealed, None if it was not)
AuditFinal = Callable[[Task, datetime | None, Sealed | None], None]


async def recover(store: TaskStore, audit_final: AuditFinal,
                  records: FinalRecords | None,
                  store_final: Callable[[Task], Awaitable[Sealed]] | None = None,
                  reattach: Callable[[Task], bool] = lambda task: False) -> int:
    """Repairs both; returns how many tasks were found cut off by the restart.
    ``store_final`` commits a task it ends, with its receipt (else ``store.put``).
    ``reattach``: takes up a task that can go on (a delegation following its peer's
    task, ``engine.reattach``), True if it did."""
    if records is not None:
        await _record_missing_finals(store, audit_final, records)
    stale = [task for task in await store.open_tasks() if not reattach(task)]
    why = "the daemon restarted while this task was running"
    for task in stale:
        ended = interrupted(task, "interrupted_by_restart", why, now_iso())
        if store_final is None:
            await store.put(ended)
            audit_final(ended, None, None)
        else:
            sealed = await store_final(ended)
            audit_final(sealed.task, None, sealed)
    if stale:
        log.warning("marked %d interrupted task(s) failed after restart", len(stale))
    return len(stale)


async def _record_missing_finals(store: TaskStore, audit_final: AuditFinal,
                                 records: FinalRecords) -> None:
    last = await records.last_at()
    if last is None:
        return
    since = last - LOOKBACK
    recorded = await records.finished_task_ids(since)
    missing = [i for i in await store.ended_since(_task_clock(since)) if i not in recorded]
    for task_id in missing:
        task = await store.get(task_id)
        if task is not None:
            audit_final(task, datetime.fromisoformat(task.updated_at), None)
    if missing:
        log.warning("wrote %d final audit record(s) lost when the previous process died",
                    len(missing))


def _task_clock(moment: datetime) -> str:
    """``moment`` the way the task store writes ``updated_at`` (``clock.now_iso``)."""
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
