from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from hypothesis import settings

from tests.delegation_support import Mesh
from tests.js_support import js_sdk_missing
from tests.sdk03_support import sdk03_python
from tests.support import Swarm


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def swarm(tmp_path: Path, http: aiohttp.ClientSession) -> AsyncIterator[Swarm]:
    """Start real daemons with ``await swarm.start("home", ...)``; all stop at teardown."""
    s = Swarm(tmp_path, http)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def mesh(tmp_path: Path, http: aiohttp.ClientSession) -> AsyncIterator[Mesh]:
    """Declare several daemons that know each other, then ``await mesh.start()``."""
    m = Mesh(tmp_path, http)
    try:
        yield m
    finally:
        await m.close()


# Every property test at length: pytest --hypothesis-profile=release (docs/operations.md).
settings.register_profile("release", max_examples=2000, deadline=None)


@pytest.fixture(scope="session")
def sdk03() -> Path:
    """The interpreter of a virtualenv with the official a2a-sdk 0.3.26 (tests/sdk03_support)."""
    return sdk03_python()


@pytest.fixture(scope="session")
def js_sdk() -> None:
    """Node with @a2a-js/sdk installed in tests/js_agent (tests/js_support), or a skip."""
    missing = js_sdk_missing()
    if missing is not None:
        pytest.skip(missing)
