from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from butler.registry.clock import ManualClock
from butler.registry.redis_store import RedisStore
from butler.registry.sqlite_store import SqliteStore
from butler.registry.store import RegistryStore
from tests.registry.registry_support import (
    REDIS_SERVER,
    LiveRegistry,
    StoreFactory,
    config,
    free_port,
)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.02)
    return False


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("redis-server") or REDIS_SERVER
    if not Path(binary).exists():
        pytest.skip("redis-server is not installed (Debian package redis-server)")
    workdir = tmp_path_factory.mktemp("redis")
    for _ in range(3):
        port = free_port()
        proc = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
             "--appendonly", "no", "--dir", str(workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        if _wait_for_port(port, proc, 10.0):
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail("redis-server did not start")
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(params=["sqlite", "redis"])
async def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StoreFactory]:
    """Opens the same store again on every call, as a restarted registry would."""
    opened: list[RegistryStore] = []
    if request.param == "sqlite":
        path = tmp_path / "registry.db"

        async def open_it() -> RegistryStore:
            return await SqliteStore.open(path)
    else:
        url = request.getfixturevalue("redis_url")
        prefix = f"test:{uuid.uuid4().hex}:"

        async def open_it() -> RegistryStore:
            return await RedisStore.open(url, prefix=prefix)

    async def factory() -> RegistryStore:
        store = await open_it()
        opened.append(store)
        return store

    yield factory
    for store in opened:
        await store.close()


@pytest.fixture
async def store(store_factory: StoreFactory) -> RegistryStore:
    return await store_factory()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def live_registry(clock: ManualClock) -> AsyncIterator[LiveRegistry]:
    reg = LiveRegistry(config(), clock)
    yield reg
    await reg.stop()
