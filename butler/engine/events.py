"""Fan-out of task events to live subscribers (SSE streams, blocking waiters)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from internal.protocol.a2a.model import TaskEvent

QUEUE_LIMIT = 1024


class EventHub:
    def __init__(self) -> None:
        self._subs: dict[str, set[asyncio.Queue[TaskEvent | None]]] = {}
        self._listeners: list[Callable[[TaskEvent], None]] = []

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

    @asynccontextmanager
    async def subscribe(self, task_id: str) -> AsyncIterator[asyncio.Queue[TaskEvent | None]]:
        queue: asyncio.Queue[TaskEvent | None] = asyncio.Queue(QUEUE_LIMIT)
        self._subs.setdefault(task_id, set()).add(queue)
        try:
            yield queue
        finally:
            subs = self._subs.get(task_id)
            if subs is not None:
                subs.discard(queue)
                if not subs:
                    del self._subs[task_id]
