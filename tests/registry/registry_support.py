"""Helpers shared by the registry tests (fixtures are in conftest.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from butler.registry.clock import Clock, SystemClock
from butler.registry.config import RegistryServiceConfig
from butler.registry.service import RunningRegistry, start_registry
from butler.registry.store import RegistryStore
from butler.registry.store_url import open_store
from internal.http import TokenEntry, hash_token
from internal.protocol.a2a.model import Identity

REDIS_SERVER = "/usr/bin/redis-server"

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789",
          "root": "root-token-0123456789"}

StoreFactory = Callable[[], Awaitable[RegistryStore]]


def token_entries() -> tuple[TokenEntry, ...]:
    return tuple(
        TokenEntry(bytes.fromhex(hash_token(tok)),
                   Identity(name=name, tier="admin" if name == "root" else "default",
                            bound=True))
        for name, tok in TOKENS.items()
    )


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}"}


def make_card(
    display: str = "Office",
    *,
    caps: tuple[str, ...] = ("memory.search",),
    skills: list[dict[str, Any]] | None = None,
    description: str = "The office agent",
    url: str = "http://127.0.0.1:8081",
) -> dict[str, Any]:
    """A card shaped like Butler's own /v2/card."""
    if skills is None:
        skills = [{"id": "search", "name": "Memory search", "description": "Full-text search",
                   "capabilities": ["memory.search"], "tags": ["memory", "Search"],
                   "examples": ["find my notes"], "cost_usd": "0.01"}]
    return {"name": display, "description": description, "url": url, "version": "0.1.0",
            "capabilities": list(caps), "skills": skills, "auth_schemes": ["bearer"],
            "streaming": True, "updated_at": "2024-01-01T00:00:00Z", "agent_id": "office"}


def config(**overrides: Any) -> RegistryServiceConfig:
    values: dict[str, Any] = {"tokens": token_entries(), "sweep_interval_seconds": 3600.0}
    values.update(overrides)
    return RegistryServiceConfig(**values)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])



class LiveRegistry:
    """A registry on a real 127.0.0.1 port that can be stopped and started again."""

    def __init__(self, cfg: RegistryServiceConfig, clock: Clock) -> None:
        self.config = cfg
        self.clock = clock
        self.port = 0
        self.store: RegistryStore | None = None
        self._running: RunningRegistry | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, store: RegistryStore) -> None:
        """Served exactly as ``butler registry serve`` serves it."""
        self.store = store
        config = dataclasses.replace(self.config, bind_address="127.0.0.1", port=self.port)
        self._running = await start_registry(config, store, self.clock)
        self.port = self._running.address[1]

    async def stop(self) -> None:
        if self._running is not None:
            await self._running.close()
            self._running = None


@contextlib.asynccontextmanager
async def sqlite_registry(folder: Path, **overrides: Any) -> AsyncIterator[LiveRegistry]:
    """A live registry on a SQLite file in ``folder``, on the system clock."""
    reg = LiveRegistry(config(**overrides), SystemClock())
    store = await open_store(f"sqlite:{folder / 'registry.db'}")
    await reg.start(store)
    try:
        yield reg
    finally:
        await reg.stop()
        await store.close()
