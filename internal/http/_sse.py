"""Server-sent events over aiohttp, shared by every binding that streams."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from internal.http._json_http import IDENTITY
from internal.http._load_limits import INFLIGHT, STREAM_SLOTS

# Frames waiting for a slow client; past this the source is held back.
FRAME_QUEUE_LIMIT = 64
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no"}


@dataclass(frozen=True)
class SseTiming:
    keepalive_seconds: float = 15.0
    poll_seconds: float = 1.0


def sse_frame(data: str, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    body = "".join(f"data: {line}\n" for line in data.split("\n"))
    return f"{head}{body}\n".encode()


async def sse_stream(request: web.Request, first: bytes, rest: AsyncIterator[bytes],
                 timing: SseTiming, headers: dict[str, str] | None = None
                 ) -> web.StreamResponse:
    """Send ``first``, then every frame of ``rest``; the caller has already produced
    ``first``, so errors before the stream (a stream cap included) are ordinary HTTP
    answers. The stream holds a stream slot instead of an in-flight one."""
    slots = request.app.get(STREAM_SLOTS)
    identity = request.get(IDENTITY)
    caller = identity.name if identity is not None else request.remote or "?"
    with slots.hold(caller) if slots is not None else contextlib.nullcontext():
        inflight = request.get(INFLIGHT)
        if inflight is not None:
            inflight.release()
        response = web.StreamResponse(headers={**SSE_HEADERS, **(headers or {})})
        await response.prepare(request)
        try:
            await response.write(first)
            await sse_follow(request, response, rest, timing)
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client left; follow has already let go of the stream
        return response


async def sse_follow(request: web.Request, response: web.StreamResponse,
                 frames: AsyncIterator[bytes], timing: SseTiming) -> None:
    """Write frames until the iterator ends; stop early when the client goes away.

    aiohttp does not cancel a handler whose client disconnected, so the frames are
    pumped by a task of their own while this loop checks the connection every
    ``poll_seconds`` and sends a keep-alive comment when it has been quiet.
    """
    # Bounded: a client that reads slower than events come holds the pump back, so the
    # source's own bounded queue fills and drops this subscriber, instead of frames
    # piling up here.
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(FRAME_QUEUE_LIMIT)

    async def pump() -> None:
        async for item in frames:
            await queue.put(item)
        await queue.put(None)

    pumper = asyncio.create_task(pump())
    quiet = 0.0
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timing.poll_seconds)
            except TimeoutError:
                if pumper.done():  # the source failed: its error is raised below
                    return
                if request.transport is None or request.transport.is_closing():
                    return
                quiet += timing.poll_seconds
                if quiet >= timing.keepalive_seconds:
                    await response.write(b": keepalive\n\n")
                    quiet = 0.0
                continue
            if item is None:
                return
            await response.write(item)
            quiet = 0.0
    finally:
        # Cancelling the pump closes the source stream, which unsubscribes it.
        pumper.cancel()
        await asyncio.wait([pumper])
        if not pumper.cancelled():
            pumper.result()
