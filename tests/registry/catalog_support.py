"""Catalog publishers and upstream registries for the ARD tests: small real servers on
127.0.0.1 port 0 whose answers a test sets, and signed catalog entries."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from butler.registry.ard_api import ARD, Ard
from butler.registry.catalog_entry import A2A_CARD, sign_entry
from butler.registry.clock import SystemClock
from butler.registry.config import RegistryServiceConfig
from butler.registry.federation_config import FederationConfig, Upstream
from butler.registry.service import RunningRegistry, start_registry
from butler.registry.store_url import open_store
from internal.signing import IdentityKey
from tests.registry.registry_support import TOKENS, config


def entry(publisher: str, name: str, *, key: IdentityKey | None = None,
          **extra: Any) -> dict[str, Any]:
    """A catalog entry of an A2A agent, signed by ``key`` when given."""
    item = {"identifier": f"urn:air:{publisher}:agent:{name}", "displayName": name.title(),
            "type": A2A_CARD, "url": f"https://{publisher}/agents/{name}.json",
            "description": f"The {name} agent", **extra}
    return sign_entry(item, key) if key is not None else item


def manifest(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"specVersion": "1.0", "host": {"displayName": "Test"}, "entries": list(entries)}


Answer = tuple[int, bytes, dict[str, str]]


class Site:
    """Answers ``pages[path]``: a JSON value, raw bytes, an (status, body, headers) tuple,
    or a coroutine function of the request; records each request's headers."""

    def __init__(self) -> None:
        self.pages: dict[str, Any] = {}
        self.asked: list[tuple[str, dict[str, str]]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None
        self.release = asyncio.Event()  # a page that hangs waits for this

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.asked.append((request.path, dict(request.headers)))
        page = self.pages.get(request.path)
        if page is None:
            return web.Response(status=404)
        if callable(page):
            answer: web.StreamResponse = await page(request)
            return answer
        if isinstance(page, tuple):
            status, body, headers = page
            return web.Response(status=status, body=body, headers=headers)
        body = page if isinstance(page, bytes) else json.dumps(page).encode()
        return web.Response(body=body, content_type="application/json")

    async def hang(self, request: web.Request) -> web.Response:
        await self.release.wait()
        return web.Response(status=503)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Site]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        try:
            yield self
        finally:
            self.release.set()
            await self._runner.cleanup()


@dataclasses.dataclass
class Registry:
    running: RunningRegistry

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.running.address[1]}"

    @property
    def ard(self) -> Ard:
        return self.running.runner.app[ARD]


def crawl_config(**federation: Any) -> RegistryServiceConfig:
    fed = FederationConfig(crawl_loopback=True, **federation)
    return config(federation=fed)


@contextlib.asynccontextmanager
async def registry(tmp: Any, name: str, cfg: RegistryServiceConfig,
                   port: int = 0) -> AsyncIterator[Registry]:
    store = await open_store(f"sqlite:{tmp / (name + '.db')}")
    fed = dataclasses.replace(cfg.federation, name=name,
                              public_url=cfg.federation.public_url or "")
    cfg = dataclasses.replace(cfg, federation=fed, bind_address="127.0.0.1", port=port)
    running = await start_registry(cfg, store, SystemClock())
    try:
        yield Registry(running)
    finally:
        await running.close()
        await store.close()


def upstream(name: str, url: str, trust: str, who: str = "alice") -> Upstream:
    return Upstream(name=name, url=url, trust=trust, token=TOKENS[who])


def search_body(text: str, federation: str = "auto", **extra: Any) -> dict[str, Any]:
    return {"query": {"text": text}, "federation": federation, **extra}


Check = Callable[[], Any]
