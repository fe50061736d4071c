"""The seam between the wire and the engine: bindings call only this interface."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from internal.protocol.a2a.auth import Identity
from internal.protocol.a2a.types import Envelope, Task, TaskEvent, TaskPage, TaskRequest, TaskState


class TaskService(Protocol):
    async def submit(self, caller: Identity, request: TaskRequest, envelope: Envelope) -> Task: ...

    async def get(self, caller: Identity, task_id: str) -> Task: ...

    async def list_tasks(
        self, caller: Identity, *, state: TaskState | None, context_id: str | None,
        cursor: str | None, limit: int,
    ) -> TaskPage: ...

    async def cancel(self, caller: Identity, task_id: str) -> Task: ...

    async def answer(self, caller: Identity, task_id: str, reply: TaskRequest) -> Task: ...

    def events(self, caller: Identity, task_id: str) -> AsyncIterator[TaskEvent]: ...

    def card(self, caller: Identity) -> dict[str, Any]: ...
