"""Client and announcer against a real registry that is stopped, restarted and emptied."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from butler.registry.announcer import Announcer, AnnouncerState
from butler.registry.client import RegistryClient, RegistryError
from butler.registry.clock import ManualClock
from butler.registry.sqlite_store import SqliteStore
from tests.registry.registry_support import TOKENS, LiveRegistry, free_port, make_card

TTL = 30
LOGGER = "butler.registry.announcer"


def state(ann: Announcer) -> AnnouncerState:
    """Read through a call: mypy would keep an attribute narrowed across the awaits."""
    return ann.state


class SteppedSleep:
    """Stands in for asyncio.sleep: records each delay and waits for the test to step."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self._arrived: asyncio.Queue[float] = asyncio.Queue()
        self._gate: asyncio.Future[None] | None = None

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        if delay == 0:
            await asyncio.sleep(0)
            return
        self._gate = asyncio.get_running_loop().create_future()
        self._arrived.put_nowait(delay)
        await self._gate

    async def sleeping(self) -> float:
        return await asyncio.wait_for(self._arrived.get(), 10)

    async def step(self) -> float:
        """Let the announcer make its next attempt; returns the delay it then sleeps."""
        assert self._gate is not None
        self._gate.set_result(None)
        return await self.sleeping()


@pytest.fixture
async def registry(live_registry: LiveRegistry, tmp_path: Path) -> LiveRegistry:
    await live_registry.start(await SqliteStore.open(tmp_path / "first.db"))
    return live_registry


@pytest.fixture
async def client(registry: LiveRegistry) -> AsyncIterator[RegistryClient]:
    async with RegistryClient(registry.url, TOKENS["alice"], timeout=5) as c:
        yield c


async def restart_empty(registry: LiveRegistry, tmp_path: Path, n: int) -> None:
    await stop(registry)
    await registry.start(await SqliteStore.open(tmp_path / f"restart-{n}.db"))


async def stop(registry: LiveRegistry) -> None:
    await registry.stop()
    if registry.store is not None:
        await registry.store.close()


def announcer(client: RegistryClient, sleep: SteppedSleep, card: dict[str, Any] | None = None,
              name: str = "office") -> Announcer:
    card = card or make_card()
    return Announcer(client, name, lambda: card, lambda: "http://127.0.0.1:8081", TTL,
                     sleep=sleep, stop_timeout=2)


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


async def test_client_round_trip_and_typed_errors(
    client: RegistryClient, registry: LiveRegistry
) -> None:
    entry = await client.register("Office", make_card(), ttl_seconds=60)
    assert entry.name == "office" and entry.ttl_seconds == 60
    assert (await client.get("office")).url == "http://127.0.0.1:8081"
    assert [e.name for e in await client.find(capability="memory.search")] == ["office"]
    await client.heartbeat("office", ttl_seconds=90)
    async with RegistryClient(registry.url, TOKENS["bob"]) as bob:
        with pytest.raises(RegistryError) as info:
            await bob.deregister("office")
        assert (info.value.http_status, info.value.code) == (403, "name_owned")
        assert not info.value.retryable
    async with RegistryClient(registry.url, "not-a-token") as nobody:
        with pytest.raises(RegistryError) as info:
            await nobody.find()
        assert info.value.http_status == 401
        assert "not-a-token" not in str(info.value)
    await client.deregister("office")
    with pytest.raises(RegistryError) as info:
        await client.get("office")
    assert info.value.code == "not_found"


async def test_find_follows_cursors_up_to_a_bound(client: RegistryClient) -> None:
    for i in range(7):
        await client.register(f"a{i}", make_card())
    assert len(await client.find(capability="memory.search", page_size=2)) == 7
    assert [e.name for e in await client.find(page_size=2, max_results=3)] == ["a0", "a1", "a2"]


async def test_unreachable_registry_is_a_retryable_error() -> None:
    async with RegistryClient(f"http://127.0.0.1:{free_port()}", "tok", timeout=2) as c:
        with pytest.raises(RegistryError) as info:
            await c.find()
    assert info.value.http_status is None and info.value.retryable


async def test_registers_refreshes_and_deregisters(
    client: RegistryClient, registry: LiveRegistry, clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    sleep = SteppedSleep()
    ann = announcer(client, sleep)
    await ann.start()
    assert state(ann) is AnnouncerState.REGISTERED
    first = await sleep.sleeping()
    assert TTL / 3 * 0.9 <= first <= TTL / 3 * 1.1
    entry = await client.get("office")
    assert entry.ttl_seconds == TTL

    clock.advance(10)
    delay = await sleep.step()  # a heartbeat
    assert TTL / 3 * 0.9 <= delay <= TTL / 3 * 1.1
    assert (await client.get("office")).expires_at == entry.expires_at + 10
    await sleep.step()
    assert len(set(sleep.delays)) == 3  # jittered, not a fixed beat

    await ann.stop()
    assert state(ann) is AnnouncerState.STOPPED
    with pytest.raises(RegistryError):
        await client.get("office")
    assert messages(caplog) == [
        f"registered office with the registry at {registry.url} (ttl {TTL}s)",
        "deregistered office from the registry",
    ]


async def test_reregisters_after_the_registry_restarts_empty(
    client: RegistryClient, registry: LiveRegistry, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    sleep = SteppedSleep()
    ann = announcer(client, sleep)
    await ann.start()
    await sleep.sleeping()
    await restart_empty(registry, tmp_path, 1)
    with pytest.raises(RegistryError):
        await client.get("office")

    await sleep.step()  # heartbeat -> not_found -> full registration straight away
    assert state(ann) is AnnouncerState.REGISTERED
    assert (await client.get("office")).name == "office"
    await sleep.step()
    await ann.stop()
    assert messages(caplog)[1:] == [
        f"re-registered office with the registry at {registry.url}",
        "deregistered office from the registry",
    ]


async def test_registry_down_backs_off_and_logs_once_per_change(
    client: RegistryClient, registry: LiveRegistry, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    sleep = SteppedSleep()
    ann = announcer(client, sleep)
    await ann.start()
    await sleep.sleeping()
    await stop(registry)

    backoff = [await sleep.step() for _ in range(6)]
    assert state(ann) is AnnouncerState.UNREACHABLE
    expected = [1, 2, 4, 8, 10, 10]  # doubling, capped at TTL/3
    assert all(e * 0.9 <= b <= e * 1.1 for e, b in zip(expected, backoff, strict=True))

    await registry.start(await SqliteStore.open(tmp_path / "back.db"))
    delay = await sleep.step()
    assert state(ann) is AnnouncerState.REGISTERED
    assert TTL / 3 * 0.9 <= delay <= TTL / 3 * 1.1
    assert (await client.get("office")).name == "office"
    log = messages(caplog)
    assert len(log) == 3, log
    assert log[1].startswith("registry unreachable (registry unreachable: ")
    assert log[2] == f"re-registered office with the registry at {registry.url}"
    await ann.stop()


async def test_start_does_not_raise_when_the_registry_is_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    sleep = SteppedSleep()
    async with RegistryClient(f"http://127.0.0.1:{free_port()}", "tok", timeout=2) as c:
        ann = announcer(c, sleep)
        await ann.start()
        assert state(ann) is AnnouncerState.UNREACHABLE
        await sleep.sleeping()
        await sleep.step()
        await ann.stop()  # never registered: nothing to deregister
    assert len(messages(caplog)) == 1


async def test_refused_registration_is_logged_once(
    client: RegistryClient, registry: LiveRegistry, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    async with RegistryClient(registry.url, TOKENS["bob"]) as bob:
        await bob.register("office", make_card())
    sleep = SteppedSleep()
    ann = announcer(client, sleep)
    await ann.start()
    assert state(ann) is AnnouncerState.REJECTED
    delays = [await sleep.sleeping(), await sleep.step(), await sleep.step()]
    assert delays[0] < delays[1] < delays[2]
    await ann.stop()
    log = [r for r in caplog.records if r.name == LOGGER]
    assert len(log) == 1 and log[0].levelno == logging.ERROR
    assert "403 name_owned" in log[0].getMessage()


async def test_changed_card_is_registered_again(
    client: RegistryClient, registry: LiveRegistry, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    card = make_card()
    sleep = SteppedSleep()
    ann = Announcer(client, "office", lambda: card, lambda: "http://127.0.0.1:8081", TTL,
                    sleep=sleep)
    await ann.start()
    await sleep.sleeping()
    registered_at = (await client.get("office")).registered_at
    card = {**card, "updated_at": "2031-01-01T00:00:00Z"}  # a new timestamp alone: heartbeat
    await sleep.step()
    assert (await client.get("office")).card["updated_at"] == "2024-01-01T00:00:00Z"
    card = make_card(caps=("gpu.run",))
    await sleep.step()
    entry = await client.get("office")
    assert "gpu.run" in entry.capabilities and entry.registered_at == registered_at
    await ann.stop()
    assert messages(caplog)[1] == "updated the card of office at the registry"
