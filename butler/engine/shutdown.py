"""How running tasks end at a stop: each gets up to the grace period to finish, then is
failed ``interrupted_by_shutdown`` and cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from butler.engine.run import TaskRun
from butler.engine.transitions import Event, failed
from internal.protocol.a2a.model import Task

Apply = Callable[[str, Event], Awaitable[Task | None]]


async def stop_runs(runs: Mapping[str, TaskRun], live: Mapping[str, Task], apply: Apply,
                    grace: float) -> None:
    await _until_idle(runs, live, grace)
    left = list(runs.values())
    why = "the daemon shut down before this task finished"
    for run in left:
        await apply(run.task_id, failed("interrupted_by_shutdown", why))
        run.cancel()
    pending = [r.handle for r in left if r.handle is not None]
    if pending:
        # Let cancelled runs clean up (a command skill kills its process group).
        await asyncio.wait(pending, timeout=5)


async def _until_idle(runs: Mapping[str, TaskRun], live: Mapping[str, Task],
                      grace: float) -> None:
    """Until every run has ended or waits on its caller, for at most ``grace``: a task
    waiting for input would otherwise hold the stop for the whole grace period."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while True:
        busy = [r.handle for r in runs.values()
                if r.handle is not None and not r.handle.done()
                and not ((t := live.get(r.task_id)) and t.state.interrupted)]
        left = deadline - loop.time()
        if not busy or left <= 0:
            return
        # A run may come to wait on its caller without ending: look again now and then.
        await asyncio.wait(busy, timeout=min(left, 0.1), return_when=asyncio.FIRST_COMPLETED)
