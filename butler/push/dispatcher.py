"""Delivers task status updates to the webhooks configured for them.

One worker per task keeps its updates in order. Each delivery is retried with
exponential backoff on network errors, timeouts, 408, 429 and 5xx; other answers,
redirects (never followed) and addresses the outbound guard refuses end it: a URL checked
when its config was created can resolve to a refused address later. Delivery is best effort: a
webhook that keeps failing never affects the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from urllib.parse import urlsplit

import aiohttp

from internal.http import OutboundGuard, outbound_session
from internal.protocol.a2a.codec import a2a_v03, a2a_v1, exact_json
from internal.protocol.a2a.model import OutboundRefused, PushConfig, TaskEvent

log = logging.getLogger("butler.push")
TOKEN_HEADER = "X-A2A-Notification-Token"  # noqa: S105 -- a header name, not a secret


def payload(config: PushConfig, event: TaskEvent) -> bytes:
    """1.0: a ``StreamResponse`` (``{"statusUpdate": ...}``); 0.3: the whole task."""
    if config.wire == "0.3":
        return exact_json.dumps_bytes(a2a_v03.encode_task(event.task))
    return exact_json.dumps_bytes(a2a_v1.encode_event(event))


class PushDispatcher:
    def __init__(self, guard: OutboundGuard, *, max_attempts: int, timeout: float,
                 backoff: float = 0.5, max_backoff: float = 30.0) -> None:
        self.guard = guard
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._configs: dict[str, dict[str, PushConfig]] = {}
        self._queues: dict[str, asyncio.Queue[TaskEvent]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._session: aiohttp.ClientSession | None = None
        self.failures = 0  # deliveries that raised something unexpected

    def track(self, config: PushConfig) -> None:
        self._configs.setdefault(config.task_id, {})[config.id] = config

    def configs(self, task_id: str) -> dict[str, PushConfig]:
        return dict(self._configs.get(task_id, {}))

    def untrack(self, task_id: str, config_id: str) -> None:
        configs = self._configs.get(task_id, {})
        configs.pop(config_id, None)
        if not configs:
            self._configs.pop(task_id, None)

    def on_event(self, event: TaskEvent) -> None:
        task_id = event.task.id
        if event.kind != "status" or task_id not in self._configs:
            return
        self._queues.setdefault(task_id, asyncio.Queue()).put_nowait(event)
        if task_id not in self._workers:
            self._workers[task_id] = asyncio.create_task(self._work(task_id),
                                                         name=f"push-{task_id}")

    def forget(self, task_ids: list[str]) -> None:
        """The tasks were purged: their configs and anything queued for them go too."""
        for task_id in task_ids:
            self._configs.pop(task_id, None)

    async def _work(self, task_id: str) -> None:
        queue = self._queues[task_id]
        try:
            while not queue.empty():
                event = queue.get_nowait()
                for config in list(self._configs.get(task_id, {}).values()):
                    try:
                        await self.deliver(config, event)
                    except Exception:
                        # One bad delivery must not end the worker: its task's later
                        # events, and the other configs, still go out.
                        self.failures += 1
                        log.exception("push for task %s failed unexpectedly (%d so far); "
                                      "going on", task_id, self.failures)
        finally:
            # No await between the check above and this: a new event starts a new worker.
            del self._queues[task_id]
            del self._workers[task_id]

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = outbound_session(self.guard)
        return self._session

    async def deliver(self, config: PushConfig, event: TaskEvent) -> bool:
        headers = {"Content-Type": "application/json"}
        if config.token:
            headers[TOKEN_HEADER] = config.token
        if config.auth_scheme and config.auth_credentials:
            headers["Authorization"] = f"{config.auth_scheme} {config.auth_credentials}"
        body = payload(config, event)
        for attempt in range(self.max_attempts):
            if attempt:
                await asyncio.sleep(min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))
            try:
                # The session judges the host; this also refuses what aiohttp would turn
                # into a header before the session sees the URL (credentials).
                self.guard.check_target(config.url)
                async with self._http().post(
                    config.url, data=body, headers=headers, allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=self.timeout),
                ) as resp:
                    status = resp.status
            except OutboundRefused as exc:
                log.warning("push for task %s dropped: %s", config.task_id, exc.message)
                return False
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.info("push to %s for task %s failed (attempt %d): %s", _host(config.url),
                         config.task_id, attempt + 1, type(exc).__name__)
                continue
            if 200 <= status < 300:
                return True
            if status < 500 and status not in (408, 429):
                log.warning("push to %s for task %s answered HTTP %d; not retried",
                            _host(config.url), config.task_id, status)
                return False
        log.warning("push to %s for task %s failed %d times; giving up", _host(config.url),
                    config.task_id, self.max_attempts)
        return False

    async def aclose(self) -> None:
        for worker in list(self._workers.values()):
            worker.cancel()
        for worker in list(self._workers.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        if self._session is not None:
            await self._session.close()


def _host(url: str) -> str:
    """What a log line names: the webhook's host, never its query (it may hold a secret)."""
    return urlsplit(url).netloc.rpartition("@")[2] or "(no host)"
