"""The one answer size cap and the one server-sent-events reader every client uses
(``internal/http/_answers.py``), on the bytes as a peer may cut them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from internal.http import AnswerTooLarge, Capped, SseEvent, SseParser, read_capped, sse_events


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def parse(parser: SseParser, *parts: bytes) -> list[SseEvent]:
    return [event for part in parts for event in parser.feed(part)]


def test_events_cut_anywhere_read_the_same() -> None:
    stream = (b": keepalive\n\nevent: status\r\ndata: {\"a\":\ndata:  1}\n\n"
              b"id: 7\ndata: [DONE]\n\n")
    whole = parse(SseParser(1024), stream)
    assert whole == [SseEvent("status", '{"a":\n 1}'), SseEvent("message", "[DONE]")]
    for cut in range(len(stream)):
        assert parse(SseParser(1024), stream[:cut], stream[cut:]) == whole
    assert parse(SseParser(1024), *(bytes([b]) for b in stream)) == whole


def test_an_event_the_stream_ends_inside_is_dropped() -> None:
    assert parse(SseParser(1024), b"data: 1\n\ndata: 2\n") == [SseEvent("message", "1")]


def test_an_event_name_without_data_does_not_name_the_next_event() -> None:
    assert parse(SseParser(1024), b"event: x\n\ndata: 1\n\n") == [SseEvent("message", "1")]


def test_an_event_or_a_line_over_the_limit_fails() -> None:
    with pytest.raises(AnswerTooLarge):
        parse(SseParser(16), b"data: " + b"x" * 32)  # a line still without its end
    with pytest.raises(AnswerTooLarge):
        parse(SseParser(16), b"data: 12345\n" * 3)  # short lines, one long event
    assert len(parse(SseParser(16), b"data: 12345\n\n" * 3)) == 3  # each within it


async def test_sse_events_over_chunks() -> None:
    events = [e async for e in sse_events(chunks(b"data: a\n", b"\ndata: b\n\n"), 64)]
    assert [e.data for e in events] == ["a", "b"]


async def test_the_size_cap() -> None:
    assert await read_capped(chunks(b"ab", b"cd"), 4) == b"abcd"
    with pytest.raises(AnswerTooLarge, match="exceeds 3 bytes"):
        await read_capped(chunks(b"ab", b"cd"), 3)
    with pytest.raises(AnswerTooLarge):  # announced too long: no chunk is read
        Capped(3, announced=4)
