"""Raw HTTP/1.1 over a socket, for tests that play slow, broken or idle clients."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from tests.support import Instance


def assert_json_error(body: Any, code: str) -> None:
    assert isinstance(body, dict) and set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


async def connect(inst: Instance) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", inst.daemon.port)


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


def parse(data: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip()
               for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body) if body else None


async def get_healthz(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      path: str = "/healthz", token: str = "") -> int:
    """One keep-alive GET on an open connection (with ``token`` as a bearer token, if
    any); returns the status."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}\r\n".encode())
    async with asyncio.timeout(5):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        await reader.readexactly(length)
    return int(head.split()[1])
