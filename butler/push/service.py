"""A2A push notifications: config CRUD per task (``PushService``) and delivery."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

from butler.config.model import PushNotificationsConfig
from butler.engine.engine import TaskEngine
from butler.push.dispatcher import PushDispatcher
from butler.push.store import SqlitePushStore
from internal.http import OutboundGuard, OutboundRules
from internal.protocol.a2a.model import Identity, PushConfig, RequestError
from internal.shares import PoolFull, Share

log = logging.getLogger("butler.push")


class PushNotifications:
    def __init__(self, config: PushNotificationsConfig, engine: TaskEngine, data_dir: Path,
                 guard: OutboundGuard | None = None, share: Share | None = None) -> None:
        """``guard``: tests may pass their own (a resolver mapping test host names);
        ``share``: how many configs there may be, and one caller may have."""
        self.config = config
        self.share = share
        self.engine = engine
        key = "configurations.a2a.push_notifications."
        self.guard = guard or OutboundGuard(OutboundRules(
            allow_loopback=config.allow_loopback, allow_private=config.allow_private_networks,
            loopback_key=key + "allow_loopback", private_key=key + "allow_private_networks"))
        self.store = SqlitePushStore(data_dir / "push.db")
        self.dispatcher = PushDispatcher(self.guard, max_attempts=config.max_attempts,
                                         timeout=config.timeout_seconds)

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    async def start(self) -> None:
        if self.config.enabled and self.config.allow_loopback:
            log.warning("push notifications may be delivered to webhooks on this machine "
                        "(configurations.a2a.push_notifications.allow_loopback): for local "
                        "development only")
        await self.store.open()
        for config in await self.store.all_configs():
            self.dispatcher.track(config)
        self.engine.hub.listen(self.dispatcher.on_event)
        self.engine.purge_listeners.append(self._forget)

    async def _forget(self, task_ids: list[str]) -> None:
        """Purged tasks take their configs with them, in memory and on disk."""
        self.dispatcher.forget(task_ids)
        await self.store.delete_for_tasks(task_ids)

    async def aclose(self) -> None:
        await self.dispatcher.aclose()
        await self.store.close()

    async def validate(self, config: PushConfig) -> None:
        """A webhook the outbound guard refuses is refused here (``OutboundRefused``)."""
        await self.guard.check_url(config.url)

    async def create(self, caller: Identity, config: PushConfig) -> PushConfig:
        """Tracked before anything awaits a store: a task created together with its config
        (``SendMessage`` with a push config) has not run yet, so no update is missed."""
        # A live task: answered without a wait. Its stored id (the caller's may be scoped).
        task_id = (await self.engine.get(caller, config.task_id)).id
        existing = self.dispatcher.configs(task_id)
        config_id = config.id or uuid.uuid4().hex
        if len(existing) >= self.config.max_configs_per_task and config_id not in existing:
            raise RequestError("invalid_params", f"a task has at most "
                               f"{self.config.max_configs_per_task} push notification configs")
        stored = PushConfig(id=config_id, task_id=task_id, url=config.url,
                            token=config.token, auth_scheme=config.auth_scheme,
                            auth_credentials=config.auth_credentials, wire=config.wire)
        self.dispatcher.track(stored)
        try:
            await self.store.put(stored, caller.name, self.share)
        except PoolFull:  # only a new config is refused: it goes again
            self.dispatcher.untrack(task_id, config_id)
            raise
        return stored

    async def get(self, caller: Identity, task_id: str, config_id: str) -> PushConfig:
        for config in await self.list_configs(caller, task_id):
            if config.id == config_id:
                return config
        raise RequestError("task_not_found",
                           f"task {task_id} has no push notification config {config_id!r}")

    async def list_configs(self, caller: Identity, task_id: str) -> list[PushConfig]:
        task = await self.engine.get(caller, task_id)
        return await self.store.list_configs(task.id)

    async def delete(self, caller: Identity, task_id: str, config_id: str) -> None:
        """Idempotent (A2A 3.1.10): deleting a config that is not there succeeds; only a
        task the caller cannot see is an error."""
        task = await self.engine.get(caller, task_id)
        await self.store.delete(task.id, config_id)
        self.dispatcher.untrack(task.id, config_id)
