"""The lean HTTP/1.1 client (internal/protocol/a2a/http1.py) against real sockets.

A raw asyncio server on 127.0.0.1 port 0 answers each request with bytes scripted per
test, so the framing is exact: Content-Length, chunked (extensions, trailers, awkward
splits) and until-close bodies, byte by byte too; 1xx answers; keep-alive, and every case
where a connection must not be reused (Connection: close, HTTP/1.0, idle too long, closed
by the peer, unsolicited bytes, malformed answers, a timeout); the body and head limits;
peers that close early or reset; connect failures; the request as it goes on the wire;
the pool's counts and close(). A real aiohttp server checks interoperation, and
PeerClient's mapping of what goes wrong when it talks through the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import struct
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from internal.protocol.a2a.client import PeerClient
from internal.protocol.a2a.client import _http1 as http1
from internal.protocol.a2a.model import ButlerError, DelegationFailed, RequestError

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def answer(*pieces: bytes, close: bool = False, pause: float = 0.0) -> Script:
    """Write ``pieces`` one at a time, each its own TCP write; then close if asked.
    With no pieces the peer never answers: it waits for a request that never comes."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(pause)
        if close:
            writer.close()

    return run


def reset_after(raw: bytes) -> Script:
    """Write ``raw``, let the client read it, then abort the connection with a TCP reset."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer(raw, pause=0.05)(reader, writer)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    return run


class FakePeer:
    """Reads each request whole and records its raw bytes, then runs the next script (OK
    once they run out) on that connection. ``get`` asks it through the test's pool."""

    def __init__(self, pool: http1.Http1Pool) -> None:
        self.pool = pool
        self.scripts: deque[Script] = deque()
        self.requests: list[bytes] = []
        self.accepted = 0
        self.client_closed = 0  # connections the client closed (EOF or reset)
        self._writers: list[asyncio.StreamWriter] = []
        self._dropping = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.server: asyncio.Server | None = None
        self.port, self.url = 0, ""

    def then(self, *scripts: Script) -> None:
        self.scripts.extend(scripts)

    async def get(self, *, max_body: int = 1 << 20) -> http1.Answer:
        return await get(self.pool, self.url + "/", max_body=max_body)

    def drop(self) -> None:
        """Close every connection from the server's side."""
        self._dropping = True
        for writer in self._writers:
            writer.close()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.append(writer)
        self._tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            while not writer.is_closing():
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?im)^content-length: *(\d+)", head)
                body = await reader.readexactly(int(length[1])) if length else b""
                self.requests.append(head + body)
                await (self.scripts.popleft() if self.scripts else answer(OK))(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            if not self._dropping:
                self.client_closed += 1
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        self.drop()
        if self._tasks:  # each handler sees its connection end
            await asyncio.wait(self._tasks, timeout=2)
        await self.server.wait_closed()


@pytest.fixture
async def pool() -> AsyncIterator[http1.Http1Pool]:
    client = http1.Http1Pool()
    yield client
    client.close()
    await asyncio.sleep(0.01)  # the closed transports let go of their sockets


@pytest.fixture
async def peer(pool: http1.Http1Pool) -> AsyncIterator[FakePeer]:
    fake = FakePeer(pool)
    fake.server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    fake.port = fake.server.sockets[0].getsockname()[1]
    fake.url = f"http://127.0.0.1:{fake.port}"
    yield fake
    await fake.stop()


async def get(pool: http1.Http1Pool, url: str, *, method: str = "GET", max_body: int = 1 << 20,
              headers: dict[str, str] | None = None, body: bytes | None = None,
              connect_timeout: float = 1.0) -> http1.Answer:
    async with asyncio.timeout(2):  # a hang fails the test instead of stalling it
        return await pool.request(method, url, headers or {}, body, max_body=max_body,
                                  connect_timeout=connect_timeout)


async def until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(2):
        while not check():
            await asyncio.sleep(0.005)


def spy_reads(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every piece of data the client's connections receive, in order."""
    reads: list[bytes] = []
    original = http1._Connection.data_received

    def spy(self: http1._Connection, data: bytes) -> None:
        reads.append(data)
        original(self, data)

    monkeypatch.setattr(http1._Connection, "data_received", spy)
    return reads


# -- framing ---------------------------------------------------------------------------------

FRAMINGS = {  # name -> (raw answer, status, body)
    "content-length": (OK, 200, b"ok"),
    "empty": (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 200, b""),
    "204": (b"HTTP/1.1 204 No Content\r\n\r\n", 204, b""),
    "304 with a length": (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", 304, b""),
    "chunked": (CHUNKED + b"5;ext=1\r\nhello\r\n1\r\n,\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n"
                b"\r\n", 200, b"hello, world"),
}


@pytest.mark.parametrize("split", ["whole", "byte by byte"])
@pytest.mark.parametrize("name", list(FRAMINGS))
async def test_a_framed_answer_is_read_whole_and_its_connection_kept(
    peer: FakePeer, monkeypatch: pytest.MonkeyPatch, name: str, split: str,
) -> None:
    raw, status, body = FRAMINGS[name]
    pieces = [raw] if split == "whole" else [raw[i:i + 1] for i in range(len(raw))]
    reads = spy_reads(monkeypatch)
    peer.then(answer(*pieces, pause=0.001))
    got = await peer.get()
    assert (got.status, got.body) == (status, body)
    assert reads == pieces, "each write was read on its own"
    assert (await peer.get()).body == b"ok"
    assert peer.accepted == 1 and len(peer.requests) == 2, "both on one connection"


async def test_chunks_split_at_awkward_places(
    peer: FakePeer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    pieces = [CHUNKED + b"5;e", b"xt=1\r", b"\nhel", b"lo", b"\r", b"\n1\r\n,", b"\r\n6\r\n",
              b" world", b"\r\n0", b"\r\nX-Trai", b"ler: t\r\n", b"\r", b"\n"]
    reads = spy_reads(monkeypatch)
    peer.then(answer(*pieces, pause=0.002))
    got = await peer.get()
    assert reads == pieces
    assert got.body == b"hello, world" and got.headers == {"transfer-encoding": "chunked"}
    assert (await peer.get()).body == b"ok" and peer.accepted == 1


async def test_informational_answers_are_skipped(peer: FakePeer) -> None:
    peer.then(answer(b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\n"
                     b"Link: </x>\r\n\r\nHTTP/1.1 404\r\nX-Multi: a\r\nx-multi: b\r\n"
                     b"X-Space:   v  \r\nContent-Length: 4\r\n\r\ngone"))
    got = await peer.get()
    assert (got.status, got.body) == (404, b"gone")
    assert got.headers == {"x-multi": "a, b", "x-space": "v", "content-length": "4"}


# -- keep-alive ------------------------------------------------------------------------------

@pytest.mark.parametrize(("script", "connections", "client_closes"), [
    (answer(OK), 1, 0),
    (answer(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"), 2, 1),
    (answer(b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, CLOSE\r\nContent-Length: 2\r\n\r\n"
            b"ok"), 2, 1),
    (answer(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"), 2, 1),
    (answer(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"), 1, 0),
    (answer(b"HTTP/1.1 200 OK\r\n\r\no", b"k", close=True), 2, 0),  # the peer closes both
], ids=["1.1", "1.1 close", "1.1 close among tokens", "1.0", "1.0 keep-alive", "until close"])
async def test_when_a_connection_is_reused(
    peer: FakePeer, script: Script, connections: int, client_closes: int,
) -> None:
    peer.then(script, script)
    assert [(await peer.get()).body for _ in range(2)] == [b"ok", b"ok"]
    assert peer.accepted == connections
    await until(lambda: peer.client_closed == client_closes)
    assert peer.pool.open == (1 if connections == 1 else 0)


async def test_a_connection_the_peer_closed_while_idle_is_not_used(peer: FakePeer) -> None:
    assert (await peer.get()).body == b"ok" and peer.pool.open == 1
    peer.drop()
    await until(lambda: peer.pool.open == 0)
    assert (await peer.get()).body == b"ok" and peer.accepted == 2


async def test_a_connection_idle_too_long_is_not_reused(
    peer: FakePeer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http1, "IDLE_SECONDS", 0.05)
    await peer.get()
    await asyncio.sleep(0.1)
    await peer.get()
    assert peer.accepted == 2
    await until(lambda: peer.client_closed == 1)  # the stale one was closed, not leaked
    await peer.get()  # the fresh one is still young enough
    assert peer.accepted == 2 and peer.pool.open == 1


# -- limits ----------------------------------------------------------------------------------

def framed(kind: str, body: bytes) -> bytes:
    if kind == "length":
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    if kind == "chunked":
        half = len(body) // 2
        return CHUNKED + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (
            half, body[:half], len(body) - half, body[half:])
    return b"HTTP/1.1 200 OK\r\n\r\n" + body


@pytest.mark.parametrize("size", [1000, 1001])
@pytest.mark.parametrize("kind", ["length", "chunked", "close"])
async def test_the_body_limit(peer: FakePeer, kind: str, size: int) -> None:
    body = b"x" * size
    # Over the limit the peer keeps its connection open: the client must stop by itself.
    peer.then(answer(framed(kind, body), close=kind == "close" and size == 1000))
    if size == 1000:
        assert (await peer.get(max_body=1000)).body == body
        return
    with pytest.raises(http1.BodyTooLarge) as info:
        await peer.get(max_body=1000)
    assert info.value.limit == 1000 and peer.pool.open == 0
    await until(lambda: peer.client_closed == 1)


@pytest.mark.parametrize(("raw", "error"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n", http1.BodyTooLarge),
    (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (http1.MAX_HEAD + 1), http1.MalformedAnswer),
    (CHUNKED + b"1" * (http1.MAX_CHUNK_LINE + 1), http1.MalformedAnswer),
], ids=["content-length, no body yet", "endless head", "endless chunk-size line"])
async def test_a_limit_fails_without_waiting_for_more(
    peer: FakePeer, raw: bytes, error: type[Exception],
) -> None:
    peer.then(answer(raw))  # and nothing more: only the cap can end this
    with pytest.raises(error):
        await peer.get(max_body=1000)
    await until(lambda: peer.client_closed == 1)


# -- broken peers ----------------------------------------------------------------------------

MALFORMED = {
    "bad version": b"HTTP/2 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "no status code": b"HTTP/1.1 OK\r\nContent-Length: 2\r\n\r\nok",
    "four-digit status": b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok",
    "header without colon": b"HTTP/1.1 200 OK\r\nContent-Length 2\r\n\r\nok",
    "space before colon": b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok",
    "folded header": b"HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\nContent-Length: 2\r\n\r\nok",
    "non-numeric length": b"HTTP/1.1 200 OK\r\nContent-Length: two\r\n\r\nok",
    "negative length": b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\nok",
    "conflicting lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
    "bad chunk size": CHUNKED + b"zz\r\nok\r\n0\r\n\r\n",
    "17-digit chunk size": CHUNKED + b"00000000000000002\r\nok\r\n0\r\n\r\n",
    "no CRLF after chunk data": CHUNKED + b"2\r\nokXX0\r\n\r\n",
    "gzip": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nok",
    "gzip, chunked": CHUNKED.replace(b"chunked", b"gzip, chunked") + b"2\r\nok\r\n0\r\n\r\n",
    "101": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
    # "\xb2" is "²" in latin-1: str.isdigit() says yes, int() says no.
    "superscript length": b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\nok",
    "superscript status": b"HTTP/1.1 \xb200 OK\r\nContent-Length: 2\r\n\r\nok",
}


@pytest.mark.parametrize("name", list(MALFORMED))
async def test_a_malformed_answer_fails_and_its_connection_is_closed(
    peer: FakePeer, name: str,
) -> None:
    peer.then(answer(MALFORMED[name]))
    with pytest.raises(http1.MalformedAnswer):
        await peer.get()
    assert (peer.pool.open, peer.pool.in_use) == (0, 0)
    await until(lambda: peer.client_closed == 1)
    assert (await peer.get()).body == b"ok" and peer.accepted == 2


@pytest.mark.parametrize("raw", [
    b"", b"HTTP/1.1 200 OK\r\nContent-Le",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", CHUNKED + b"5\r\nhel",
], ids=["before any answer", "mid head", "mid body", "mid chunk"])
async def test_the_peer_closing_early(peer: FakePeer, raw: bytes) -> None:
    peer.then(answer(raw, close=True))
    with pytest.raises(http1.PeerClosed):
        await peer.get()
    assert (peer.pool.open, peer.pool.in_use) == (0, 0)


@pytest.mark.parametrize("cut", ["pool.close()", "a reset from the peer"])
async def test_a_body_until_close_cut_short_is_not_an_answer(
    peer: FakePeer, monkeypatch: pytest.MonkeyPatch, cut: str,
) -> None:
    reads = spy_reads(monkeypatch)
    raw = b"HTTP/1.1 200 OK\r\n\r\npartial"
    peer.then(answer(raw) if cut == "pool.close()" else reset_after(raw))
    request = asyncio.create_task(peer.get())
    await until(lambda: b"partial" in b"".join(reads))
    if cut == "pool.close()":
        peer.pool.close()
    outcome = (await asyncio.gather(request, return_exceptions=True))[0]
    assert isinstance(outcome, http1.HttpError), f"a cut-short body came back as {outcome!r}"


@pytest.mark.parametrize("later", [False, True], ids=["with the answer", "after it"])
async def test_unsolicited_bytes_end_the_connection(peer: FakePeer, later: bool) -> None:
    junk = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\njunk"
    peer.then(answer(OK, junk, pause=0.05) if later else answer(OK + junk))
    assert (await peer.get()).body == b"ok"
    await until(lambda: peer.pool.open == 0)
    assert (await peer.get()).body == b"ok" and peer.accepted == 2


@pytest.mark.parametrize("script", [
    answer(), answer(b"HTTP/1.1 200 OK\r\nContent-"),
    answer(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart"),
], ids=["no answer", "mid head", "mid body"])
async def test_a_timeout_mid_request_closes_the_connection(peer: FakePeer, script: Script) -> None:
    peer.then(script)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await peer.pool.request("GET", peer.url, {}, None, max_body=100, connect_timeout=1)
    assert (peer.pool.in_use, peer.pool.open) == (0, 0)
    await until(lambda: peer.client_closed == 1)
    assert (await peer.get()).body == b"ok" and peer.accepted == 2


# -- connecting ------------------------------------------------------------------------------

async def test_a_refused_connection(pool: http1.Http1Pool) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound and never listening: connections are refused
        with pytest.raises(http1.ConnectFailed) as info:
            await get(pool, f"http://127.0.0.1:{sock.getsockname()[1]}/")
    assert isinstance(info.value.__cause__, ConnectionRefusedError)
    assert (pool.open, pool.in_use) == (0, 0)


async def test_the_connect_timeout(pool: http1.Http1Pool) -> None:
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
        with pytest.raises(http1.ConnectFailed) as info:  # not get()'s own 2 s timeout
            await get(pool, f"http://127.0.0.1:{listener.getsockname()[1]}/",
                      connect_timeout=0.2)
    assert isinstance(info.value.__cause__, TimeoutError)


# -- the request on the wire ---------------------------------------------------------------

async def test_the_request_as_sent(peer: FakePeer) -> None:
    base = f"http://user:secret@127.0.0.1:{peer.port}"
    await get(peer.pool, base + "/a/b?q=1&r=%2F", headers={"Authorization": "Bearer t"})
    await get(peer.pool, base, method="POST", body=b'{"a": 1}',
              headers={"Content-Type": "application/json"})
    await get(peer.pool, base + "/c", method="POST")
    await get(peer.pool, base + "/d", method="DELETE")
    host = b"Host: 127.0.0.1:%d\r\n" % peer.port
    assert peer.requests == [
        b"GET /a/b?q=1&r=%2F HTTP/1.1\r\n" + host + b"Authorization: Bearer t\r\n\r\n",
        b"POST / HTTP/1.1\r\n" + host + b"Content-Length: 8\r\n"
        b"Content-Type: application/json\r\n\r\n{\"a\": 1}",
        b"POST /c HTTP/1.1\r\n" + host + b"Content-Length: 0\r\n\r\n",
        b"DELETE /d HTTP/1.1\r\n" + host + b"\r\n",
    ]
    assert peer.accepted == 1


@pytest.mark.parametrize(("method", "path", "headers"), [
    ("GET", "/", {"X-A": "v\r\nX-Evil: 1"}),
    ("GET", "/", {"X-A\nX-Evil": "1"}),
    ("GET / HTTP/1.1\r\nX-Evil: 1\r\n\r\nGET", "/", {}),
    ("GET", "/a\r\nX-Evil: 1", {}),
], ids=["header value", "header name", "method", "path"])
async def test_cr_or_lf_in_the_request_is_refused_before_sending(
    peer: FakePeer, method: str, path: str, headers: dict[str, str],
) -> None:
    with pytest.raises(ValueError, match="CR or LF"):
        await get(peer.pool, peer.url + path, method=method, headers=headers)
    await asyncio.sleep(0.01)
    assert (peer.accepted, peer.requests) == (0, [])


# -- the pool --------------------------------------------------------------------------------

async def test_pool_counts_and_close(peer: FakePeer) -> None:
    pool = peer.pool
    peer.then(answer(OK), answer())  # one answers, the other never does
    first, second = (asyncio.create_task(peer.get()) for _ in range(2))
    done, _ = await asyncio.wait([first, second], return_when=asyncio.FIRST_COMPLETED)
    busy = second if first in done else first
    assert len(done) == 1 and done.pop().result().body == b"ok"
    assert (pool.open, pool.in_use, peer.accepted) == (2, 1, 2)
    pool.close()
    with pytest.raises(http1.PeerClosed):
        await busy
    assert (pool.open, pool.in_use) == (0, 0)
    await until(lambda: peer.client_closed == 2)


# -- a real server, and PeerClient over the pool ------------------------------------------

@pytest.fixture
async def aiohttp_peer() -> AsyncIterator[tuple[str, list[int]]]:
    ports: list[int] = []  # the client's port of each request: one per connection

    async def handle(request: web.Request) -> web.StreamResponse:
        ports.append(request.transport.get_extra_info("peername")[1])  # type: ignore[union-attr]
        if request.path == "/echo":
            return web.Response(text=f"{request.method} {await request.text()} "
                                     f"{request.headers['X-A']}")
        if request.path == "/stream":  # no length: aiohttp sends it chunked
            resp = web.StreamResponse()
            await resp.prepare(request)
            for i in range(3):
                await resp.write(b"part %d|" % i)
            await resp.write_eof()
            return resp
        if request.path.startswith("/moved/"):
            raise web.HTTPFound("/v2/tasks/y")
        if request.path.startswith("/big/"):
            return web.json_response(["x" * 100] * 20)
        error = {"code": "task_not_found", "message": f"no task {request.path[10:]}"}
        return web.json_response({"error": error}, status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", ports
    await runner.cleanup()


async def test_against_an_aiohttp_server(
    pool: http1.Http1Pool, aiohttp_peer: tuple[str, list[int]],
) -> None:
    url, ports = aiohttp_peer
    posted = await get(pool, url + "/echo", method="POST", body=b"hi", headers={"X-A": "1"})
    assert (posted.status, posted.body) == (200, b"POST hi 1")
    streamed = await get(pool, url + "/stream")
    assert streamed.headers["transfer-encoding"] == "chunked"
    assert streamed.body == b"part 0|part 1|part 2|"
    assert len(ports) == 2 and len(set(ports)) == 1, "one connection, kept alive"
    assert (pool.open, pool.in_use) == (1, 0)


@pytest.mark.parametrize(("where", "kind", "code", "words"), [
    ("", RequestError, "task_not_found", "no task x"),
    ("/moved", DelegationFailed, "peer_error", "redirected"),
    ("/big", DelegationFailed, "peer_error", "exceeds 1000 bytes"),
    ("refused", DelegationFailed, "peer_unreachable", "cannot connect"),
])
async def test_peer_client_over_the_pool(
    pool: http1.Http1Pool, aiohttp_peer: tuple[str, list[int]], http: aiohttp.ClientSession,
    where: str, kind: type[ButlerError], code: str, words: str,
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        base = (f"http://127.0.0.1:{closed.getsockname()[1]}" if where == "refused"
                else aiohttp_peer[0] + where)
        client = PeerClient(base, "tok", session=http, http1_pool=pool,
                            max_response_bytes=1000, timeout=2.0, connect_timeout=1.0)
        with pytest.raises(ButlerError) as info:
            await client.get("x")
    assert type(info.value) is kind and info.value.code == code
    assert words in info.value.message
    assert pool.in_use == 0


async def test_a_head_answer_has_no_body_whatever_its_length_says() -> None:
    async def app_head(request: web.Request) -> web.Response:
        return web.Response(body=b"hello")

    app = web.Application()
    app.router.add_get("/", app_head)  # aiohttp answers HEAD for GET routes
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    pool = http1.Http1Pool()
    try:
        async with asyncio.timeout(5):
            head = await pool.request("HEAD", f"http://127.0.0.1:{port}/", {}, None,
                                      max_body=1024, connect_timeout=5)
            got = await pool.request("GET", f"http://127.0.0.1:{port}/", {}, None,
                                     max_body=1024, connect_timeout=5)
        assert (head.status, head.headers["content-length"], head.body) == (200, "5", b"")
        assert got.body == b"hello"  # the kept connection was not thrown off by the HEAD
    finally:
        pool.close()
        await runner.cleanup()
