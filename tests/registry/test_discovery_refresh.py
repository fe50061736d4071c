"""A registry lookup that many tasks miss at once is made once: they share its answer, and
one waiter's cancellation does not end it for the others."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from butler.delegation.discovery import RegistryDiscovery
from butler.registry.client import RegistryClient
from butler.registry.model import AgentEntry
from internal.http import OutboundGuard, OutboundRules
from tests.registry.registry_support import TOKENS, LiveRegistry, make_card, sqlite_registry
from tests.support import wait_until


class CountingClient(RegistryClient):
    """The real client, counting the lookups that reach the registry; the first one waits
    for ``release`` so every caller misses the cache while it is under way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.finds = 0
        self.release = asyncio.Event()

    async def find(self, **kwargs: Any) -> list[AgentEntry]:
        self.finds += 1
        await self.release.wait()
        return await super().find(**kwargs)


@pytest.fixture
async def registry(tmp_path: Path, http: aiohttp.ClientSession) -> AsyncIterator[LiveRegistry]:
    async with sqlite_registry(tmp_path) as reg:
        for name in ("alpha", "beta", "gamma"):
            async with http.put(f"{reg.url}/v1/agents/{name}", json={
                    "card": make_card(name.title(), caps=("x.cap",)),
                    "url": f"http://127.0.0.1:9/{name}", "ttl_seconds": 60},
                    headers={"Authorization": f"Bearer {TOKENS['alice']}"}) as resp:
                assert resp.status == 201
        yield reg


def discovery_of(client: RegistryClient) -> RegistryDiscovery:
    return RegistryDiscovery(client, self_name="home", peer_token="peer-secret", static=(),
                             guard=OutboundGuard(OutboundRules(allow_loopback=True)),
                             cache_seconds=600, trusted_registrants=("alice",))


async def test_concurrent_misses_share_one_lookup(
        registry: LiveRegistry, http: aiohttp.ClientSession) -> None:
    client = CountingClient(registry.url, TOKENS["root"], session=http)
    discovery = discovery_of(client)
    by_cap = [asyncio.ensure_future(discovery(["x.cap"])) for _ in range(10)]
    routable = [asyncio.ensure_future(discovery.routable()) for _ in range(10)]
    await wait_until(lambda: client.finds == 2, what="one lookup per key under way")
    client.release.set()
    found = await asyncio.gather(*by_cap)
    every = await asyncio.gather(*routable)
    assert client.finds == 2  # one by capability, one for the router
    assert all(sorted(c.name for c in f) == ["alpha", "beta", "gamma"] for f in found)
    assert all(r is every[0] for r in every) and len(every[0]) == 3
    await discovery(["x.cap"])
    await discovery.routable()
    assert client.finds == 2  # cached


async def test_a_cancelled_waiter_does_not_end_the_lookup_for_the_others(
        registry: LiveRegistry, http: aiohttp.ClientSession) -> None:
    client = CountingClient(registry.url, TOKENS["root"], session=http)
    discovery = discovery_of(client)
    first = asyncio.ensure_future(discovery(["x.cap"]))
    second = asyncio.ensure_future(discovery(["x.cap"]))
    await wait_until(lambda: client.finds == 1, what="the lookup under way")
    first.cancel()
    client.release.set()
    assert len(await second) == 3
    assert first.cancelled()
    assert client.finds == 1
