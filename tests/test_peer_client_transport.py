"""The /v2 client on both its transports (``V2Transport`` over the one outbound session,
aiohttp; ``BlockingV2Transport`` over http.client, run in a thread here), against a hostile
raw server: the same rules must hold on each.

A raw asyncio server on 127.0.0.1 port 0 answers each request with bytes scripted per
test: answers over the size cap (with Content-Length, chunked, until close), a length
announced and never sent, endless heads, malformed answers, peers that close early;
then connect failures. Each must end as a ``DelegationFailed`` with a clear code, soon,
and no error text may carry the bearer token. The request as it goes on the wire shows
what the session leaves out, and that aiohttp keeps the connection alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import pytest

from internal.http import CONFIGURED, OutboundGuard, outbound_session
from internal.protocol.a2a.client import BlockingV2Transport, V2Transport
from internal.protocol.a2a.model import ButlerError, DelegationFailed

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
TOKEN = "tok-never-in-an-error-0123456789"
OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}'
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
LIMIT = 1000


def answer(*pieces: bytes, close: bool = False) -> Script:
    """Write ``pieces`` one TCP write each; then close if asked, else keep the line open."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
        if close:
            writer.close()

    return run


class RawPeer:
    """Reads each request whole, records it, then runs the next script (``OK`` when none)."""

    def __init__(self) -> None:
        self.scripts: deque[Script] = deque()
        self.requests: list[bytes] = []
        self.accepted = 0
        self.url = ""
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.append(writer)
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while not writer.is_closing():
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?im)^content-length: *(\d+)", head)
                body = await reader.readexactly(int(length[1])) if length else b""
                self.requests.append(head + body)
                await (self.scripts.popleft() if self.scripts else answer(OK))(reader, writer)
        writer.close()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()


@pytest.fixture
async def peer() -> AsyncIterator[RawPeer]:
    raw = RawPeer()
    await raw.start()
    yield raw
    await raw.stop()


class Client(Protocol):
    async def request(self, method: str, path: str, *, body: Any = None) -> Any: ...


class Threaded:
    """The blocking client, called from a worker thread so the raw server keeps serving."""

    def __init__(self, client: BlockingV2Transport) -> None:
        self.client = client

    async def request(self, method: str, path: str, *, body: Any = None) -> Any:
        return await asyncio.to_thread(self.client.request, method, path, body=body)


@contextlib.asynccontextmanager
async def client_for(transport: str, url: str, **kwargs: Any) -> AsyncIterator[Client]:
    guard = OutboundGuard(CONFIGURED)
    if transport == "blocking":
        yield Threaded(BlockingV2Transport(url, TOKEN, guard=guard, **kwargs))
        return
    async with outbound_session(guard) as session:
        yield V2Transport(url, TOKEN, session=session, guard=guard, **kwargs)


@pytest.fixture(params=["aiohttp", "blocking"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def client(peer: RawPeer, transport: str) -> AsyncIterator[Client]:
    async with client_for(transport, peer.url, name="raw", max_response_bytes=LIMIT,
                          timeout=2.0, connect_timeout=1.0) as made:
        yield made


async def fails(call: Awaitable[object]) -> ButlerError:
    async with asyncio.timeout(5):  # a hang fails the test instead of stalling it
        with pytest.raises(ButlerError) as info:
            await call
    assert TOKEN not in info.value.message
    return info.value


def framed(kind: str, body: bytes) -> bytes:
    if kind == "length":
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    if kind == "chunked":
        half = len(body) // 2
        return CHUNKED + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (
            half, body[:half], len(body) - half, body[half:])
    return b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body


@pytest.mark.parametrize("size", [LIMIT, LIMIT + 1])
@pytest.mark.parametrize("kind", ["length", "chunked", "close"])
async def test_the_answer_size_cap(peer: RawPeer, client: Client, kind: str,
                                   size: int) -> None:
    body = b'"' + b"x" * (size - 2) + b'"'
    # Over the cap the peer keeps its connection open: the client must stop by itself.
    peer.scripts.append(answer(framed(kind, body), close=kind == "close" and size == LIMIT))
    if size == LIMIT:
        assert await client.request("GET", "/") == "x" * (size - 2)
        return
    err = await fails(client.request("GET", "/"))
    assert isinstance(err, DelegationFailed) and err.code == "peer_error"
    assert f"exceeds {LIMIT} bytes" in err.message


async def test_a_length_over_the_cap_fails_without_waiting_for_the_body(
    peer: RawPeer, client: Client,
) -> None:
    peer.scripts.append(answer(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n"))
    err = await fails(client.request("GET", "/"))
    assert err.code == "peer_error" and "exceeds" in err.message


MALFORMED = {
    "endless head": b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 70000,
    "bad version": b"HTTP/2 200 OK\r\nContent-Length: 2\r\n\r\n{}",
    "no status code": b"HTTP/1.1 OK\r\nContent-Length: 2\r\n\r\n{}",
    "four-digit status": b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n{}",
    "header without colon": b"HTTP/1.1 200 OK\r\nContent-Length 2\r\n\r\n{}",
    "non-numeric length": b"HTTP/1.1 200 OK\r\nContent-Length: two\r\n\r\n{}",
    "negative length": b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\n{}",
    "conflicting lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    "bad chunk size": CHUNKED + b"zz\r\n{}\r\n0\r\n\r\n",
    "no CRLF after chunk data": CHUNKED + b"2\r\n{}XX0\r\n\r\n",
    "not JSON": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    "HTML error page": b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 13\r\n\r\n<html></html>",
    "redirect to metadata": b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\n"
                            b"Content-Length: 0\r\n\r\n",
}


@pytest.mark.parametrize("name", list(MALFORMED))
async def test_a_malformed_answer_is_a_peer_error(peer: RawPeer, client: Client,
                                                  name: str, transport: str) -> None:
    peer.scripts.append(answer(MALFORMED[name]))
    if transport == "blocking" and name == "no CRLF after chunk data":
        # http.client skips the two bytes after a chunk unread. Harmless here: the
        # blocking transport reads one answer per connection, so nothing can follow it.
        assert await client.request("GET", "/") == {}
        return
    err = await fails(client.request("GET", "/"))
    assert isinstance(err, DelegationFailed) and err.code == "peer_error", err
    assert await client.request("GET", "/") == {}, "the next call gets a fresh connection"


@pytest.mark.parametrize("raw", [
    b"", b"HTTP/1.1 200 OK\r\nContent-Le",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", CHUNKED + b"5\r\nhel",
], ids=["before any answer", "mid head", "mid body", "mid chunk"])
async def test_the_peer_closing_mid_answer(peer: RawPeer, client: Client,
                                           raw: bytes) -> None:
    # POST: aiohttp retries an idempotent request once on a fresh connection when the
    # first closed before any answer; a submit is not idempotent and must fail.
    peer.scripts.append(answer(raw, close=True))
    err = await fails(client.request("POST", "/v2/tasks", body={}))
    assert isinstance(err, DelegationFailed) and err.code == "peer_error", err
    assert "raw" in err.message


async def test_a_refused_connection(transport: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound and never listening: connections are refused
        async with client_for(transport, f"http://127.0.0.1:{sock.getsockname()[1]}",
                              timeout=2, connect_timeout=1) as client:
            err = await fails(client.request("GET", "/v2/tasks/x"))
    assert err.code == "peer_unreachable" and "cannot connect" in err.message


async def test_the_connect_timeout(transport: str) -> None:
    # A listener that never accepts: once its queue is full, SYNs go unanswered.
    with socket.create_server(("127.0.0.1", 0), backlog=0) as listener, \
            contextlib.ExitStack() as queued:
        for _ in range(8):
            sock = queued.enter_context(socket.socket())
            sock.settimeout(0.1)
            try:
                sock.connect(listener.getsockname())
            except TimeoutError:
                break
        else:
            pytest.skip("this system queues every connection")
        async with client_for(transport, f"http://127.0.0.1:{listener.getsockname()[1]}",
                              timeout=4, connect_timeout=0.2) as client:
            err = await fails(client.request("GET", "/v2/tasks/x"))
    assert err.code in ("peer_timeout", "peer_unreachable"), err


async def test_the_request_as_sent_and_the_kept_connection(peer: RawPeer, client: Client,
                                                           transport: str) -> None:
    await client.request("GET", "/v2/tasks/a")
    await client.request("POST", "/v2/tasks", body={"a": 1})
    # The blocking transport closes each connection: a command makes only a few requests.
    assert peer.accepted == (1 if transport == "aiohttp" else 2)
    get, post = (raw.decode().lower() for raw in peer.requests)
    assert get.startswith("get /v2/tasks/a http/1.1\r\n")
    assert f"authorization: bearer {TOKEN}".lower() in get
    for sent in (get, post):
        assert "accept-encoding" not in sent and "user-agent" not in sent
        assert "cookie" not in sent
    assert post.endswith('\r\n\r\n{"a":1}') or post.endswith('\r\n\r\n{"a": 1}')


async def test_credentials_in_a_peer_url_are_refused_before_connecting(
    peer: RawPeer, transport: str,
) -> None:
    async with client_for(transport, peer.url.replace("//", "//user:pw@"),
                          timeout=2) as client:
        err = await fails(client.request("GET", "/v2/tasks/x"))
    assert err.code == "peer_address_refused" and "credentials" in err.message
    assert peer.accepted == 0


async def test_a_peer_that_never_answers_times_out(peer: RawPeer, transport: str) -> None:
    peer.scripts.append(answer(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{"))
    async with client_for(transport, peer.url, timeout=0.5) as client:
        err = await fails(client.request("GET", "/"))
    assert err.code == "peer_timeout" and "did not answer within " in err.message



def drip(head: bytes, byte: bytes) -> Script:
    """``head``, then ``byte`` at a time, each well within the timeout, without end: only
    a limit on the whole exchange ends it."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        while not writer.is_closing():
            writer.write(byte)
            await writer.drain()
            await asyncio.sleep(0.05)  # the hostile peer's pace, not a synchronisation

    return run


@pytest.mark.parametrize(("head", "byte"), [
    (b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a"),  # a header line that never ends
    (CHUNKED, b"0"),  # a chunk size that never ends
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", b" "),  # a body
])
async def test_a_peer_that_drips_its_answer_times_out(peer: RawPeer, transport: str,
                                                      head: bytes, byte: bytes) -> None:
    peer.scripts.append(drip(head, byte))
    async with client_for(transport, peer.url, timeout=0.5) as client:
        err = await fails(client.request("GET", "/"))
    assert err.code == "peer_timeout" and "did not answer within " in err.message
