"""Keeps one agent registered: register, heartbeat every TTL/3, re-register when the
registry forgets us, back off while it is down, deregister on a clean stop.

Logs one line per change of state, never one per attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from butler.registry.client import RegistryClient, RegistryError

log = logging.getLogger("butler.registry.announcer")

MIN_BACKOFF = 1.0
MAX_BACKOFF = 60.0
JITTER = 0.1


class AnnouncerState(enum.StrEnum):
    IDLE = "idle"
    REGISTERED = "registered"
    UNREACHABLE = "unreachable"
    REJECTED = "rejected"
    STOPPED = "stopped"


class Announcer:
    def __init__(
        self,
        client: RegistryClient,
        name: str,
        card_provider: Callable[[], Mapping[str, Any]],
        url_provider: Callable[[], str],
        ttl_seconds: int,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        start_timeout: float = 3.0,
        stop_timeout: float = 3.0,
    ) -> None:
        self._client = client
        self._name = name
        self._card_provider = card_provider
        self._url_provider = url_provider
        self._ttl = ttl_seconds
        self._sleep = sleep
        self._rng = rng or random.Random()  # noqa: S311 -- jitter, not secrets
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._state = AnnouncerState.IDLE
        self._task: asyncio.Task[None] | None = None
        self._first_attempt = asyncio.Event()
        self._last_card: dict[str, Any] | None = None
        self._ever_registered = False

    @property
    def state(self) -> AnnouncerState:
        return self._state

    @property
    def refresh_interval(self) -> float:
        return self._ttl / 3

    @property
    def max_backoff(self) -> float:
        """Never wait so long between attempts that a whole TTL passes unnoticed."""
        return max(MIN_BACKOFF, min(MAX_BACKOFF, self._ttl / 3))

    async def start(self) -> None:
        """Begin announcing; waits for the first attempt at most ``start_timeout``
        seconds, and never raises because the registry is down."""
        if self._task is not None:
            raise RuntimeError("announcer already started")
        self._task = asyncio.create_task(self._run(), name=f"registry-announcer-{self._name}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_attempt.wait(), self._start_timeout)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._state is AnnouncerState.REGISTERED:
            try:
                await asyncio.wait_for(self._client.deregister(self._name), self._stop_timeout)
                log.info("deregistered %s from the registry", self._name)
            except (RegistryError, TimeoutError) as exc:
                log.warning("could not deregister %s from the registry: %s", self._name, exc)
        self._state = AnnouncerState.STOPPED

    async def _run(self) -> None:
        failures = 0
        must_register = True
        while True:
            beat = False
            try:
                card = dict(self._card_provider())
                beat = not must_register and _same_card(card, self._last_card)
                if beat:
                    await self._client.heartbeat(self._name, ttl_seconds=self._ttl)
                else:
                    await self._register(card, card_changed=not must_register)
                must_register, failures = False, 0
                delay = self._jitter(self.refresh_interval)
            except RegistryError as exc:
                must_register = True
                if exc.code == "not_found" and beat:
                    # The registry restarted empty, or our entry expired: register again now.
                    delay = 0.0
                else:
                    failures += 1
                    delay = self._backoff(failures, exc.retry_after)
                    self._fail(exc, retryable=exc.retryable)
            except Exception as exc:
                must_register = True
                failures += 1
                delay = self._backoff(failures, None)
                self._fail(exc, retryable=False)
            self._first_attempt.set()
            await self._sleep(delay)

    async def _register(self, card: dict[str, Any], *, card_changed: bool) -> None:
        await self._client.register(
            self._name, card, url=self._url_provider(), ttl_seconds=self._ttl
        )
        self._last_card = card
        self._state = AnnouncerState.REGISTERED
        if card_changed:
            log.info("updated the card of %s at the registry", self._name)
        elif self._ever_registered:
            log.info("re-registered %s with the registry at %s", self._name,
                     self._client.base_url)
        else:
            log.info("registered %s with the registry at %s (ttl %ss)", self._name,
                     self._client.base_url, self._ttl)
        self._ever_registered = True

    def _fail(self, exc: Exception, *, retryable: bool) -> None:
        state = AnnouncerState.UNREACHABLE if retryable else AnnouncerState.REJECTED
        if state is self._state:
            return
        self._state = state
        if retryable:
            log.warning("registry unreachable (%s); %s keeps serving and retries with backoff",
                        exc, self._name)
        else:
            log.error("registry refused %s (%s); retrying with backoff up to %ss", self._name,
                      exc, round(self.max_backoff), exc_info=not isinstance(exc, RegistryError))

    def _jitter(self, seconds: float) -> float:
        return seconds * (1 + self._rng.uniform(-JITTER, JITTER))

    def _backoff(self, failures: int, retry_after: float | None) -> float:
        delay = min(self.max_backoff, MIN_BACKOFF * 2 ** min(failures - 1, 16))
        if retry_after is not None:
            delay = min(self.max_backoff, max(delay, retry_after))
        return self._jitter(delay)


def _same_card(card: dict[str, Any], last: dict[str, Any] | None) -> bool:
    """Whether a heartbeat suffices; a card's own timestamp changing is not a change."""
    if last is None:
        return False
    return {**card, "updated_at": None} == {**last, "updated_at": None}
