"""Which registry store a URL names (``sqlite:PATH`` or ``redis://...``), opened."""

from __future__ import annotations

from pathlib import Path

from butler.registry.store import RegistryStore, redact_url


async def open_store(url: str) -> RegistryStore:
    """``sqlite:PATH`` or ``redis://...``; the Redis client is imported only when used."""
    if url.startswith("sqlite:"):
        from butler.registry.sqlite_store import SqliteStore

        return await SqliteStore.open(Path(url.removeprefix("sqlite:")))
    if url.startswith(("redis://", "rediss://", "unix://")):
        from butler.registry.redis_store import RedisStore

        return await RedisStore.open(url)
    raise ValueError(f"unsupported store URL scheme in {redact_url(url)!r}")


def store_folder(url: str) -> Path | None:
    """The folder a ``sqlite:PATH`` store lives in (one registry process holds it);
    None for Redis, which several replicas share by design."""
    return Path(url.removeprefix("sqlite:")).parent if url.startswith("sqlite:") else None
