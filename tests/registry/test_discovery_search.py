"""What a registry's ARD search answers becomes a candidate only by the token rules: an
A2A card of a trusted publisher, at a URL on its domain, not a configured peer's; and a
registry that hangs or answers garbage leaves routing with what it had."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from butler.config.model import PeerConfig
from butler.delegation import discovery as discovery_module
from butler.delegation.discovery import RegistryDiscovery
from butler.registry.catalog_entry import A2A_CARD, MCP_CARD
from butler.registry.client import RegistryClient
from internal.http import OutboundGuard, OutboundRules


def result(name: str, url: str, *, publisher: str = "127.0.0.1", kind: str = A2A_CARD
           ) -> dict[str, Any]:
    return {"identifier": f"urn:air:{publisher}:agent:{name}", "displayName": name.title(),
            "type": kind, "url": url, "description": "translates poems", "tags": ["poetry"],
            "capabilities": ["poems.translate"], "score": 90, "source": "x",
            "sourceTrust": "local"}


class FakeRegistry:
    """A registry whose ``POST /search`` answers what the test says, or hangs."""

    def __init__(self) -> None:
        self.answer: Any = {"results": []}
        self.hang = False
        self.searches = 0
        self.release = asyncio.Event()

    async def search(self, request: web.Request) -> web.Response:
        self.searches += 1
        if self.hang:
            await self.release.wait()
        return web.json_response(self.answer)


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeRegistry, str]]:
    reg = FakeRegistry()
    app = web.Application()
    app.router.add_post("/search", reg.search)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield reg, f"http://127.0.0.1:{runner.addresses[0][1]}"
    reg.release.set()
    await runner.cleanup()


def discovery_of(url: str, http: aiohttp.ClientSession,
                 peers: tuple[PeerConfig, ...] = ()) -> RegistryDiscovery:
    return RegistryDiscovery(RegistryClient(url, "t", session=http), self_name="home",
                             peer_token="peer-secret", static=peers,
                             guard=OutboundGuard(OutboundRules(allow_loopback=True)),
                             cache_seconds=600, trusted_publishers=("127.0.0.1",))


async def test_only_trusted_a2a_entries_on_their_domain_become_candidates(
        fake: tuple[FakeRegistry, str], http: aiohttp.ClientSession) -> None:
    reg, url = fake
    card = "/.well-known/agent-card.json"
    reg.answer = {"results": [
        result("poet", "http://127.0.0.1:9/poet" + card),
        result("elsewhere", "http://evil.example/x" + card),  # not on 127.0.0.1
        result("stranger", "http://127.0.0.2:9" + card, publisher="127.0.0.2"),
        result("tools", "http://127.0.0.1:9/mcp", kind=MCP_CARD),
        result("office", "http://127.0.0.1:9/o" + card),  # a configured peer's name
        result("nocard", "http://127.0.0.1:9/poet.json"),
        result("x" * 200, "http://127.0.0.1:9/long" + card),
        "garbage", {"identifier": 7}]}
    office = PeerConfig(name="office", url="http://10.0.0.5:8081", token="o")
    found = await discovery_of(url, http, (office,)).search("translate a poem")
    [(cand, route)] = found
    assert (cand.name, cand.url, cand.token) == ("poet", "http://127.0.0.1:9/poet",
                                                 "peer-secret")
    assert route.peer == "poet" and route.source == f"registry:{url}"
    assert route.tags == ("poetry",) and route.capabilities == ("poems.translate",)


async def test_a_hanging_or_garbled_registry_leaves_routing_as_it_was(
        fake: tuple[FakeRegistry, str], http: aiohttp.ClientSession,
        monkeypatch: pytest.MonkeyPatch) -> None:
    reg, url = fake
    monkeypatch.setattr(discovery_module, "SEARCH_SECONDS", 0.05)
    discovery = discovery_of(url, http)
    reg.hang = True
    assert await discovery.search("translate a poem") == ()
    assert await discovery.search("translate a poem") == ()  # not asked again: cached
    assert reg.searches == 1
    reg.hang = False
    reg.answer = {"results": "no"}
    assert await discovery.search("something else") == ()
    reg.answer = [1, 2]
    assert await discovery.search("a third text") == ()
