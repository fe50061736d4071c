"""Blocking callers, each waiting for its task to settle: to be committed terminal, or
to wait on its caller (``input-required``)."""

from __future__ import annotations

import asyncio

from internal.protocol.a2a.model import Task


class Settlements:
    def __init__(self) -> None:
        self._waiters: dict[str, list[asyncio.Future[Task]]] = {}

    @property
    def waiting(self) -> int:
        """How many callers wait, over all tasks."""
        return sum(len(w) for w in self._waiters.values())

    def watch(self, task_id: str) -> asyncio.Future[Task]:
        """A future resolved with the task once it is committed terminal or interrupted."""
        waiter: asyncio.Future[Task] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(task_id, []).append(waiter)
        return waiter

    def unwatch(self, task_id: str, waiter: asyncio.Future[Task]) -> None:
        waiters = self._waiters.get(task_id)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._waiters[task_id]

    async def until(self, task_id: str, waiter: asyncio.Future[Task]) -> Task:
        try:
            return await waiter
        finally:
            if not waiter.done():
                self.unwatch(task_id, waiter)

    def settled(self, task: Task) -> None:
        for waiter in self._waiters.pop(task.id, ()):
            if not waiter.done():
                waiter.set_result(task)

    def failed(self, task_id: str, exc: BaseException) -> None:
        """The task could not be stored: its waiters get the error, not a wait forever."""
        for waiter in self._waiters.pop(task_id, ()):
            if not waiter.done():
                waiter.set_exception(exc)
