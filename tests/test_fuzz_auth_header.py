"""Generated Authorization headers against a live daemon and a live registry, as raw
bytes over keep-alive connections: every answer is 401 or 400 (200 for the rare valid
token), a JSON error with a documented code, never a 5xx; the server still answers a
valid request afterwards. BUTLER_FUZZ_AUTH_HEADERS sets how many (default 10,000 for
the daemon, a fifth of that for the registry); BUTLER_FUZZ_SEED picks another sequence.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import aiohttp

from butler.registry.clock import ManualClock
from butler.registry.sqlite_store import SqliteStore
from tests.registry.registry_support import TOKENS, LiveRegistry
from tests.registry.registry_support import config as registry_config
from tests.support import Swarm

COUNT = int(os.environ.get("BUTLER_FUZZ_AUTH_HEADERS", "10000"))
SEED = int(os.environ.get("BUTLER_FUZZ_SEED", "20261121"))
CONNECTIONS = 4
ERROR_CODES = {400: {"header_too_large", "invalid_request"}, 401: {"unauthenticated"}}


def headers(rng: random.Random, token: str, count: int) -> Iterator[bytes]:
    """Authorization values as raw bytes: junk, near misses, huge, non-ASCII, controls."""
    schemes = [b"Bearer", b"bearer", b"BEARER", b"Basic", b"Token", b"Bearer:", b"", b"Bear"]
    valid = token.encode()
    printable = bytes(range(0x21, 0x7F))
    makers = [
        lambda: rng.randbytes(rng.randint(0, 64)),
        lambda: rng.choice(schemes) + b" " + rng.randbytes(rng.randint(0, 80)),
        lambda: b"Bearer " + bytes(rng.choices(printable, k=rng.randint(1, 100))),
        lambda: b"Bearer " + valid[:rng.randint(0, len(valid))] + rng.randbytes(rng.randint(0, 4)),
        lambda: b"Bearer " + valid + bytes([rng.choice(b"\x00\x01\x7f\x80\xff\t ")]),
        lambda: rng.choice(schemes) + b" " * rng.randint(0, 3) + b"\t" * rng.randint(0, 2) + valid,
        lambda: b"Bearer " + b"x" * rng.choice([4090, 4097, 5000, 8100, 8200, 9000, 20000]),
        lambda: ("Bearer " + "".join(chr(rng.randint(0x80, 0x10FFFF) & 0x10FFFF)
                                     for _ in range(rng.randint(1, 20)))).encode(
            "utf-8", "surrogatepass"),
        lambda: b"Bearer " + bytes(rng.choices(range(0x80, 0x100), k=rng.randint(1, 40))),
        lambda: bytes(rng.choices([0, 1, 8, 9, 11, 12, 27, 31, 127], k=rng.randint(1, 10))),
        lambda: b"Bearer " + valid.upper(),
        lambda: b"Bearer " + rng.randbytes(8) + b"\r\nX-Injected: 1",
        lambda: b"Bearer " + valid + b"\r\n\r\nGET /v2/card HTTP/1.1",
    ]
    yield b"Bearer " + valid
    for _ in range(count - 1):
        yield rng.choice(makers)()


class RawClient:
    """HTTP/1.1 over asyncio streams, so any bytes can be sent as a header value."""

    def __init__(self, port: int, path: str) -> None:
        self.port = port
        self.path = path
        self.conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def close(self) -> None:
        if self.conn is not None:
            self.conn[1].close()
            with contextlib.suppress(ConnectionError):
                await self.conn[1].wait_closed()
            self.conn = None

    async def send(self, value: bytes) -> tuple[int, bytes]:
        # A value that breaks the framing (CR, LF) gets a connection of its own, closed after
        # the first answer, so a second "request" smuggled into it cannot be misread.
        framing = b"\r" in value or b"\n" in value
        if framing:
            await self.close()
        if self.conn is None:
            self.conn = await asyncio.open_connection("127.0.0.1", self.port)
        reader, writer = self.conn
        writer.write(b"GET " + self.path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Authorization: " + value + b"\r\n\r\n")
        async with asyncio.timeout(10):
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            fields = {k.lower(): v.strip().lower()
                      for k, _, v in (x.partition(":") for x in lines[1:])}
            body = await reader.readexactly(int(fields["content-length"]))
        if framing or lines[0].startswith("HTTP/1.0") or fields.get("connection") == "close":
            await self.close()
        return int(lines[0].split()[1]), body


async def fuzz(port: int, path: str, token: str, count: int) -> dict[int, int]:
    rng = random.Random(SEED)
    values = list(headers(rng, token, count))
    seen: dict[int, int] = {}

    async def worker(share: list[bytes]) -> None:
        client = RawClient(port, path)
        try:
            for value in share:
                try:
                    status, body = await client.send(value)
                except (asyncio.IncompleteReadError, ConnectionError) as exc:
                    raise AssertionError(f"no answer to {value[:120]!r}") from exc
                seen[status] = seen.get(status, 0) + 1
                assert status in (200, 400, 401), f"{status} for {value[:120]!r}: {body[:200]!r}"
                if status != 200:
                    code = json.loads(body)["error"]["code"]
                    assert code in ERROR_CODES[status], (value[:120], code)
        finally:
            await client.close()

    await asyncio.gather(*(worker(values[i::CONNECTIONS]) for i in range(CONNECTIONS)))
    assert sum(seen.values()) == count
    return seen


async def test_daemon_survives_generated_authorization_headers(
    swarm: Swarm, http: aiohttp.ClientSession
) -> None:
    home = await swarm.start("home", extra={
        "rate_limits": {"per_caller_per_second": 0, "per_address_per_second": 0}})
    seen = await fuzz(home.daemon.port, "/v2/card", home.tokens["operator"], COUNT)
    assert seen[401] > COUNT // 4 and seen[400] > COUNT // 10 and seen[200] >= 1
    async with http.get(f"{home.url}/v2/card", headers=home.headers()) as resp:
        assert resp.status == 200


async def test_registry_survives_generated_authorization_headers(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    reg = LiveRegistry(registry_config(), ManualClock())
    store = await SqliteStore.open(tmp_path / "registry.db")
    await reg.start(store)
    try:
        seen = await fuzz(reg.port, "/v1/agents", TOKENS["alice"], max(COUNT // 5, 100))
        assert seen[401] > 0 and seen[200] >= 1
        async with http.get(f"{reg.url}/v1/agents",
                            headers={"Authorization": f"Bearer {TOKENS['alice']}"}) as resp:
            assert resp.status == 200
    finally:
        await reg.stop()
        await store.close()
