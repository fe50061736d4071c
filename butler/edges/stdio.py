"""A2A JSON-RPC as a line loop: one request per line in, one answer per line out.

The carrier of ``butler stdio`` (docs/protocol.md, "Over stdio"). It only frames lines:
the JSON-RPC itself is the same ``JsonRpcDispatcher`` the HTTP endpoint uses, so a
request means the same over both. Requests run concurrently and answers go out as they
are ready, each with its request's id; a stream's events are one answer line each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.model import Identity, RequestError
from internal.protocol.a2a.server import JsonRpcDispatcher

log = logging.getLogger("butler.stdio")

# Whoever can start ``butler stdio`` already owns its data folder and config, so it is the
# operator: one fixed identity, tier admin (docs/protocol.md, "Over stdio").
STDIO_IDENTITY = Identity(name="stdio", tier="admin")
_CHUNK = 64 * 1024

Read = Callable[[], Awaitable[bytes]]  # the next bytes of input; b"" at its end


@dataclass(frozen=True)
class LineLimits:
    max_line_bytes: int  # a longer line is answered with an error and skipped
    max_inflight: int  # requests handled at once; past it, input is not read
    grace_seconds: float  # at the end of input, how long in-flight requests may finish


async def lines(read: Read, max_bytes: int) -> AsyncIterator[bytes | None]:
    """Each line without its newline, or ``None`` for one longer than ``max_bytes``
    (never held in memory whole). A last line without a newline counts."""
    buffer = bytearray()
    skipping = False
    while chunk := await read():
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if not skipping:
                buffer += chunk[start:end]
            yield None if skipping or len(buffer) > max_bytes else bytes(buffer)
            buffer.clear()
            skipping = False
            start = end + 1
        if not skipping:
            buffer += chunk[start:]
            if len(buffer) > max_bytes:
                skipping = True
                buffer.clear()
    if skipping:
        yield None
    elif buffer:
        yield bytes(buffer)


class LineWriter:
    """Whole lines to the output, each written at once, so concurrent answers never mix.
    Once the reader has gone (a broken pipe), answers are dropped and ``gone`` is set."""

    def __init__(self, writer: asyncio.StreamWriter | None, file: BinaryIO) -> None:
        self._writer = writer  # None: a regular file, written directly
        self._file = file
        self.gone = asyncio.Event()

    async def send(self, body: dict[str, Any]) -> None:
        if self.gone.is_set():
            return
        data = exact_json.dumps_bytes(body) + b"\n"
        try:
            if self._writer is None:
                self._file.write(data)
                self._file.flush()
            else:
                self._writer.write(data)
                await self._writer.drain()
        except (BrokenPipeError, ConnectionResetError):
            log.warning("stdout closed by its reader: answers are dropped from now on")
            self.gone.set()

    async def close(self) -> None:
        with contextlib.suppress(OSError):
            if self._writer is not None:
                await self._writer.drain()  # each send drained: nothing is left to flush
                self._writer.close()
            else:
                self._file.close()


class StdioServer:
    def __init__(self, dispatcher: JsonRpcDispatcher, limits: LineLimits,
                 caller: Identity = STDIO_IDENTITY) -> None:
        self.dispatcher = dispatcher
        self.limits = limits
        self.caller = caller

    async def serve(self, read: Read, out: LineWriter, stop: asyncio.Event) -> None:
        """Until the input ends, ``stop`` is set or the output's reader has gone; then
        the requests in flight finish (for up to the grace period) before it returns."""
        slots = asyncio.Semaphore(self.limits.max_inflight)
        running: set[asyncio.Task[None]] = set()

        def done(task: asyncio.Task[None]) -> None:
            running.discard(task)
            slots.release()

        async def read_all() -> None:
            async for line in lines(read, self.limits.max_line_bytes):
                if line is not None and not line.strip():
                    continue  # blank lines (a trailing "\r\n" or a keep-alive) carry nothing
                await slots.acquire()
                task = asyncio.create_task(self._one(line, out))
                running.add(task)
                task.add_done_callback(done)

        reader = asyncio.create_task(read_all(), name="stdio-read")
        ended = [asyncio.create_task(stop.wait()), asyncio.create_task(out.gone.wait())]
        await asyncio.wait([reader, *ended], return_when=asyncio.FIRST_COMPLETED)
        for task in (reader, *ended):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        if running:
            _, late = await asyncio.wait(running, timeout=self.limits.grace_seconds)
            if late:
                log.warning("%d request(s) still running %gs after the end of input: "
                            "canceled", len(late), self.limits.grace_seconds)
                for task in late:
                    task.cancel()
                await asyncio.wait(late)

    async def _one(self, line: bytes | None, out: LineWriter) -> None:
        try:
            if line is None:
                too_large = RequestError("payload_too_large", "request line longer than "
                                         f"{self.limits.max_line_bytes} bytes")
                await out.send(self.dispatcher.failure(too_large, None).body)
                return
            answer = await self.dispatcher.answer(line, self.caller, None)
            await out.send(answer.body)
            if answer.rest is not None:
                try:
                    async for body in answer.rest:
                        await out.send(body)
                finally:
                    await answer.rest.aclose()  # type: ignore[attr-defined]
        except Exception:  # one request's failure must not end the loop: log it, go on
            log.exception("stdio request failed")


async def open_stdio(loop: asyncio.AbstractEventLoop) -> tuple[Read, LineWriter]:
    """Standard input and output as async streams, with output kept for answers alone.

    The answers' file descriptor is a copy of fd 1; fd 1 itself then points at stderr, so
    a stray ``print`` in a plugin or a child process's output can never corrupt the
    protocol stream.
    """
    out_file = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    read = await _reader(loop)
    try:
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, out_file)
    except ValueError:  # a regular file: writes to it do not block
        return read, LineWriter(None, out_file)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return read, LineWriter(writer, out_file)


async def _reader(loop: asyncio.AbstractEventLoop) -> Read:
    stdin = os.fdopen(os.dup(0), "rb", buffering=0)
    reader = asyncio.StreamReader(limit=_CHUNK)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    except ValueError:  # a regular file: read in a thread, it never waits for a writer
        def read_file() -> Awaitable[bytes]:
            return asyncio.to_thread(stdin.read, _CHUNK)
        return read_file

    def read_pipe() -> Awaitable[bytes]:
        return reader.read(_CHUNK)
    return read_pipe
