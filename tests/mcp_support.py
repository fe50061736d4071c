"""What the MCP tests over stdio and over HTTP share: a session with ``butler mcp`` (a
child process) or with a daemon's ``/mcp``, each through the official SDK's client."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.support import REPO, Instance, child_env, write_config

# tests/mcp_server_fixture.py: the official SDK's server, with a tool of each kind.
FIXTURE = Path(__file__).resolve().parent / "mcp_server_fixture.py"


def calc(pids: Path, **extra: Any) -> dict[str, Any]:
    """An ``mcp`` skill entry running the fixture; each process appends its pid to ``pids``."""
    return {"id": "calc", "mcp": {"command": [sys.executable, str(FIXTURE), str(pids)]},
            "expose": True, **extra}


@asynccontextmanager
async def mcp_butler(tmp_path: Path, cfg: dict[str, Any]) -> AsyncIterator[ClientSession]:
    path = write_config(tmp_path, cfg["agent"]["id"], cfg)
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "butler", "mcp", "-c", str(path)],
                                   env=child_env(), cwd=REPO)
    with (tmp_path / "mcp-stderr.log").open("w") as log:
        async with stdio_client(params, errlog=log) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def mcp_http(inst: Instance, who: str) -> AsyncIterator[ClientSession]:
    async with httpx2.AsyncClient(headers=inst.headers(who)) as client, \
            streamable_http_client(f"{inst.url}/mcp", http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session




async def cancel_after_progress(session: ClientSession) -> None:
    """Call the ``wait`` skill, see its progress, then abandon the call: the SDK sends
    ``notifications/cancelled`` for it."""
    running = asyncio.Event()
    said: list[str | None] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        said.append(message)
        running.set()

    call = asyncio.create_task(session.call_tool("wait", {"task": "take your time"},
                                                 progress_callback=progress))
    async with asyncio.timeout(30):
        await running.wait()
    assert said == ["waiting"]
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await call
