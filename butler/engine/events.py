"""Who hears of a task's changes: its event streams' subscribers and listeners
(``EventHub``), and the blocking callers waiting for its outcome (``OutcomeWaiters``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from internal.protocol.a2a.model import Task, TaskEvent

QUEUE_LIMIT = 1024


class EventHub:
    def __init__(self) -> None:
        self._subs: dict[str, set[asyncio.Queue[TaskEvent | None]]] = {}
        self._listeners: list[Callable[[TaskEvent], None]] = []
        # Runs waiting for someone to follow their task (``until_followed``).
        self._awaited: dict[str, asyncio.Event] = {}

    def listen(self, listener: Callable[[TaskEvent], None]) -> None:
        """Every event of every task, synchronously: ``listener`` must not block."""
        self._listeners.append(listener)

    def publish(self, event: TaskEvent) -> None:
        for listener in self._listeners:
            listener(event)
        for queue in tuple(self._subs.get(event.task.id, ())):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                # A subscriber this far behind is dropped rather than buffered forever.
                self._subs[event.task.id].discard(queue)
                queue.get_nowait()
                queue.put_nowait(None)

    def subscribers(self, task_id: str) -> int:
        return len(self._subs.get(task_id, ()))

    async def until_followed(self, task_id: str) -> None:
        """Returns once the task has a subscriber (at once if it has one)."""
        if self._subs.get(task_id):
            return
        followed = self._awaited.setdefault(task_id, asyncio.Event())
        try:
            await followed.wait()
        finally:
            if self._awaited.get(task_id) is followed:
                del self._awaited[task_id]

    @asynccontextmanager
    async def subscribe(self, task_id: str) -> AsyncIterator[asyncio.Queue[TaskEvent | None]]:
        queue: asyncio.Queue[TaskEvent | None] = asyncio.Queue(QUEUE_LIMIT)
        self._subs.setdefault(task_id, set()).add(queue)
        if (awaited := self._awaited.get(task_id)) is not None:
            awaited.set()
        try:
            yield queue
        finally:
            subs = self._subs.get(task_id)
            if subs is not None:
                subs.discard(queue)
                if not subs:
                    del self._subs[task_id]


class OutcomeWaiters:
    """Blocking callers, each waiting for its task's outcome: the task committed terminal,
    or waiting on its caller (``input-required``)."""

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

    def resolve(self, task: Task) -> None:
        for waiter in self._waiters.pop(task.id, ()):
            if not waiter.done():
                waiter.set_result(task)

    def fail(self, task_id: str, exc: BaseException) -> None:
        """The task could not be stored: its waiters get the error, not a wait forever."""
        for waiter in self._waiters.pop(task_id, ()):
            if not waiter.done():
                waiter.set_exception(exc)
