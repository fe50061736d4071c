"""An outbound call's answer, read: the one size cap and the one server-sent-events reader
every client uses (peers on every binding, the registry, the planner's model endpoint).

No I/O of its own and no aiohttp: a client hands it the bytes as they arrive, from
aiohttp's stream (``read_capped``, ``capped``, ``sse_events``) or from ``http.client``
(``Capped``, ``SseParser``), and maps ``AnswerTooLarge`` to an error its caller can act on.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

from internal.protocol.a2a.model import DelegationFailed


class AnswerTooLarge(DelegationFailed):
    """An answer (or one event of a stream) over the cap its client set: a peer's
    (``peer_error``) unless the client maps it to its own error."""

    def __init__(self, limit: int, what: str = "answer") -> None:
        super().__init__("peer_error", f"{what} exceeds {limit} bytes")
        self.limit = limit
        self.what = what


class Capped:
    """Counts an answer's bytes as they come: an announced length over the cap fails
    before any of the body is read, and so does the first chunk past it."""

    def __init__(self, limit: int, announced: int | None = None) -> None:
        if announced is not None and announced > limit:
            raise AnswerTooLarge(limit)
        self.limit = limit
        self.size = 0

    def add(self, chunk: bytes) -> bytes:
        self.size += len(chunk)
        if self.size > self.limit:
            raise AnswerTooLarge(self.limit)
        return chunk


async def capped(chunks: AsyncIterable[bytes], limit: int, *,
                 announced: int | None = None) -> AsyncIterator[bytes]:
    """``chunks`` as they come, until they pass ``limit`` bytes in all."""
    count = Capped(limit, announced)
    async for chunk in chunks:
        yield count.add(chunk)


async def read_capped(chunks: AsyncIterable[bytes], limit: int, *,
                      announced: int | None = None) -> bytes:
    """The whole body, at most ``limit`` bytes (``announced``: its Content-Length)."""
    return b"".join([chunk async for chunk in capped(chunks, limit, announced=announced)])


@dataclass(frozen=True)
class SseEvent:
    event: str  # "message" unless the stream named it
    data: str  # its ``data:`` lines, joined by newlines


class SseParser:
    """Server-sent events from a stream's bytes as they arrive: ``feed`` returns the events
    completed so far; an event the stream ends inside is dropped. An event (or a line
    still without its end) may be at most ``limit`` bytes: a line reader's own limit
    (aiohttp's is 128 KiB) would cut a task's longer output."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buffer = b""
        self._size = 0  # of the event being read
        self._event = "message"
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SseEvent]:
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > self._limit:
            raise AnswerTooLarge(self._limit, "an event")
        return [event for line in lines if (event := self._line(line)) is not None]

    def _line(self, raw: bytes) -> SseEvent | None:
        self._size += len(raw) + 1
        if self._size > self._limit:
            raise AnswerTooLarge(self._limit, "an event")
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if line.startswith("event:"):
            self._event = line[6:].strip()
        elif line.startswith("data:"):
            self._data.append(line[5:].removeprefix(" "))
        elif not line:
            event = SseEvent(self._event, "\n".join(self._data)) if self._data else None
            self._event, self._data, self._size = "message", [], 0
            return event
        return None


async def sse_events(chunks: AsyncIterable[bytes], limit: int) -> AsyncIterator[SseEvent]:
    """The events of a stream, each at most ``limit`` bytes."""
    parser = SseParser(limit)
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event
