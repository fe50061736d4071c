"""What the MCP tests over stdio and over HTTP share."""

from __future__ import annotations

import asyncio
import contextlib

from mcp import ClientSession


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
