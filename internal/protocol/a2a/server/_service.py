"""The seam between the wire and the engine: bindings call only these interfaces."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from internal.protocol.a2a.model import (
    Envelope,
    Identity,
    PushConfig,
    Task,
    TaskEvent,
    TaskPage,
    TaskRequest,
    TaskState,
)


class TaskService(Protocol):
    async def submit(self, caller: Identity, request: TaskRequest, envelope: Envelope) -> Task: ...

    async def get(self, caller: Identity, task_id: str) -> Task: ...

    async def list_tasks(
        self, caller: Identity, *, state: TaskState | None, context_id: str | None,
        cursor: str | None, limit: int, updated_after: str | None = None,
        by_update: bool = False,
    ) -> TaskPage:
        """Newest first: by creation, or with ``by_update`` by last update; ``updated_after``
        keeps tasks updated at or after that time (an ISO timestamp as tasks carry)."""

    async def cancel(self, caller: Identity, task_id: str) -> Task: ...

    async def answer(self, caller: Identity, task_id: str, reply: TaskRequest) -> Task: ...

    def events(self, caller: Identity, task_id: str) -> AsyncIterator[TaskEvent]: ...

    def card(self, caller: Identity) -> dict[str, Any]: ...


class PushService(Protocol):
    """Push-notification configs of a task; only the task's owner (or an admin) sees them."""

    @property
    def enabled(self) -> bool: ...

    async def validate(self, config: PushConfig) -> None:
        """Raise ``invalid_params`` for a webhook URL that may not be called."""

    async def create(self, caller: Identity, config: PushConfig) -> PushConfig: ...

    async def get(self, caller: Identity, task_id: str, config_id: str) -> PushConfig: ...

    async def list_configs(self, caller: Identity, task_id: str) -> list[PushConfig]: ...

    async def delete(self, caller: Identity, task_id: str, config_id: str) -> None: ...
