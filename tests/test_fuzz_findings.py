"""Inputs the fuzzers found, each pinned on a real daemon: the answer is a documented 4xx
with a JSON error, never a 500. Those marked xfail are open; when one is fixed its test
passes, fails as XPASS, and its mark should go."""

from __future__ import annotations

import asyncio
import base64
import logging
from pathlib import Path

import aiohttp
import pytest

from butler.registry.clock import ManualClock
from butler.registry.sqlite_store import SqliteStore
from tests.registry.registry_support import TOKENS, LiveRegistry
from tests.registry.registry_support import config as registry_config
from tests.support import Swarm


def cursor(payload: str) -> str:
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


async def answer(http: aiohttp.ClientSession, method: str, url: str,
                 **kwargs: object) -> tuple[int, str]:
    async with http.request(method, url, **kwargs) as resp:  # type: ignore[arg-type]
        body = await resp.json()
        return resp.status, body["error"]["code"] if resp.status >= 400 else ""


@pytest.mark.parametrize("depth", ["\u00b2", "\u0661", "0" * 5000])
async def test_a_depth_header_that_is_not_ascii_digits_is_invalid(
    swarm: Swarm, http: aiohttp.ClientSession, depth: str
) -> None:
    # "²".isdigit() is True but int("²") raises: this was a 500.
    home = await swarm.start("home")
    got = await answer(http, "POST", f"{home.url}/v2/tasks", json={"task": "x"},
                       headers={**home.headers(), "X-Swarm-Depth": depth})
    assert got == (400, "invalid_envelope")


async def test_a_page_size_in_superscript_digits_is_invalid(
    swarm: Swarm, http: aiohttp.ClientSession
) -> None:
    home = await swarm.start("home")
    got = await answer(http, "GET", f"{home.url}/v2/tasks?limit=%C2%B2", headers=home.headers())
    assert got == (400, "invalid_params")


@pytest.mark.parametrize("payload", ["[" * 3000 + "]" * 3000, '{"s": ' + "9" * 30 + "}"],
                         ids=["nested", "huge"])
async def test_a_forged_cursor_is_invalid(
    swarm: Swarm, http: aiohttp.ClientSession, payload: str
) -> None:
    home = await swarm.start("home")
    got = await answer(http, "GET", f"{home.url}/v2/tasks", params={"cursor": cursor(payload)},
                       headers=home.headers())
    assert got == (400, "invalid_params")


async def send_raw(port: int, request: bytes) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    async with asyncio.timeout(10):
        status = int((await reader.readline()).split()[1])
    writer.close()
    return status


def token_bytes_in_logs(caplog: pytest.LogCaptureFixture, token: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if token in r.getMessage() or token in (r.exc_text or "")
            or (r.exc_info is not None and token in repr(r.exc_info[1]))]


async def test_malformed_http_never_logs_the_token(
    swarm: Swarm, caplog: pytest.LogCaptureFixture
) -> None:
    home = await swarm.start("home")
    token = home.tokens["operator"]
    caplog.set_level(logging.DEBUG)
    status = await send_raw(home.daemon.port, b"GET /v2/card HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            b"Authorization: Bearer " + token.encode() + b"\x01\r\n\r\n")
    assert status == 400
    assert not token_bytes_in_logs(caplog, token)


async def test_registry_malformed_http_never_logs_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reg = LiveRegistry(registry_config(), ManualClock())
    store = await SqliteStore.open(tmp_path / "registry.db")
    await reg.start(store)
    caplog.set_level(logging.DEBUG)
    try:
        status = await send_raw(reg.port, b"GET /v1/agents HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                b"Authorization: Bearer " + TOKENS["alice"].encode()
                                + b"\x01\r\n\r\n")
    finally:
        await reg.stop()
        await store.close()
    assert status == 400
    assert not token_bytes_in_logs(caplog, TOKENS["alice"])
