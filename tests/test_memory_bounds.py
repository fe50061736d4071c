"""What callers can make grow stays bounded under a flood: the registry discovery cache
(keyed by caller-chosen capability lists), a subscriber that stops reading its event
stream. Memory is measured with tracemalloc, not wall clocks. (The audit writer's bound
is in test_audit_backpressure.py, push configs leaving with their task in
test_a2a_push.py, stream counts in test_stream_caps.py.)"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from butler.delegation.discovery import CACHE_ENTRIES, RegistryDiscovery
from butler.engine.events import QUEUE_LIMIT, EventHub
from butler.registry.client import RegistryClient
from internal.http import OutboundGuard, OutboundRules
from internal.protocol.a2a.model import Task, TaskEvent, TaskRequest, TaskState
from tests.registry.registry_support import TOKENS, LiveRegistry, sqlite_registry


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[LiveRegistry]:
    async with sqlite_registry(tmp_path) as reg:
        yield reg


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def test_a_flood_of_capability_lists_keeps_the_discovery_cache_flat(
        registry: LiveRegistry, http: aiohttp.ClientSession) -> None:
    discovery = RegistryDiscovery(RegistryClient(registry.url, TOKENS["root"], session=http),
                                  self_name="home", peer_token="", static=(),
                                  guard=OutboundGuard(OutboundRules()), cache_seconds=3600)

    def capabilities(i: int) -> list[str]:  # long, distinct, as a hostile caller sends
        return [f"cap-{i}-{j}-" + "x" * 100 for j in range(8)]

    tracemalloc.start()  # before the warm-up: what it allocates and the flood frees counts
    try:
        for i in range(2 * CACHE_ENTRIES):  # warm: the cache is full from here on
            assert await discovery(capabilities(i)) == []
        before = traced()
        for i in range(2 * CACHE_ENTRIES, 6 * CACHE_ENTRIES):
            await discovery(capabilities(i))
        grown = traced() - before
    finally:
        tracemalloc.stop()
    assert len(discovery._cache) <= CACHE_ENTRIES
    # Unbounded, the 1,024 new keys alone would hold over 1 MB.
    assert grown < 256 * 1024, grown


def a_task(n: int) -> Task:
    return Task(id="t", context_id="c", owner="o", state=TaskState.WORKING,
                request=TaskRequest(text="x"), created_at="", updated_at=f"{n:012d}",
                status_message="progress " * 50)


async def test_a_subscriber_that_stops_reading_is_dropped_not_buffered() -> None:
    hub = EventHub()
    tracemalloc.start()
    async with hub.subscribe("t") as stalled, hub.subscribe("t") as reading:
        try:
            before = traced()
            received = 0
            for n in range(10 * QUEUE_LIMIT):  # ten times what a queue holds
                hub.publish(TaskEvent(a_task(n), "status"))
                while not reading.empty():  # the live subscriber keeps up
                    reading.get_nowait()
                    received += 1
            grown = traced() - before
        finally:
            tracemalloc.stop()
        assert received == 10 * QUEUE_LIMIT
        assert hub.subscribers("t") == 1  # the stalled one is gone
        held = [stalled.get_nowait() for _ in range(stalled.qsize())]
        assert held[-1] is None  # told its stream is over
        assert len(held) <= QUEUE_LIMIT
        # 10,240 events of ~600 bytes each would be ~6 MB if buffered.
        assert grown < 2 * 1024 * 1024, grown
