"""The CLI's transport (``BlockingV2Transport``, http.client) obeys the one outbound guard
as the aiohttp session does: every hostile URL refused before any connection, a name
resolved once and connected only where every address passed, redirects answered and never
followed (so the token goes nowhere else), certificates verified; and ``butler`` says
what went wrong in one line, never with a traceback. The exchange rules both transports
share (size cap, malformed answers, timeouts) are tested on both in
tests/test_peer_client_transport.py.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from internal.http import CONFIGURED, OutboundGuard
from internal.protocol.a2a.client import BlockingV2Transport
from internal.protocol.a2a.model import ButlerError, DelegationFailed
from tests.hostile_urls import HOSTILE_NAMES, Listener, hostile_urls
from tests.support import run_cli
from tests.test_tls import make_ca_and_cert

TOKEN = "tok-never-in-an-error-0123456789"
OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}'


class Names:
    """A hosts file for the blocking transport: the corpus's hostile names and ``extra``;
    records each name asked."""

    def __init__(self, extra: Mapping[str, Sequence[str]] | None = None) -> None:
        self.names = {**HOSTILE_NAMES, **{k: tuple(v) for k, v in (extra or {}).items()}}
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host not in self.names:
            raise OSError("Name or service not known")
        return list(self.names[host])


class Peer:
    """Answers every request with ``reply`` and records what it was sent."""

    def __init__(self, reply: bytes = OK) -> None:
        self.reply = reply
        self.requests: list[bytes] = []
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.requests.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(self.reply)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # a client that gave up on the handshake
        finally:
            writer.close()

    @asynccontextmanager
    async def running(self, tls: ssl.SSLContext | None = None) -> AsyncIterator[Peer]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=tls)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            server.close()
            await server.wait_closed()


async def fails(client: BlockingV2Transport, path: str = "/v2/tasks") -> ButlerError:
    with pytest.raises(ButlerError) as info:
        await asyncio.wait_for(asyncio.to_thread(client.request, "GET", path), 10)
    assert TOKEN not in info.value.message
    return info.value


async def test_every_hostile_url_is_refused_before_any_connection() -> None:
    names = Names()
    async with Listener().running() as listener:
        for url in hostile_urls(listener.port):
            client = BlockingV2Transport(url, TOKEN, guard=OutboundGuard(CONFIGURED),
                                         resolve=names, timeout=2)
            err = await fails(client)
            assert isinstance(err, DelegationFailed), url
            assert err.code == "peer_address_refused", (url, err.message)
            # The client's name is the URL given, less any credentials in it.
            assert err.message.startswith(f"{client.name}: outbound call to "), err.message
            assert ":pass@" not in err.message
        assert listener.connections == 0
    assert names.asked, "the hostile names went through the transport's resolver"


async def test_a_name_is_resolved_once_and_connected_where_it_passed() -> None:
    async with Peer().running() as peer:
        names = Names({"peer.test": ["127.0.0.1"]})
        client = BlockingV2Transport(f"http://peer.test:{peer.port}", TOKEN, resolve=names,
                                     guard=OutboundGuard(CONFIGURED), timeout=5)
        assert await asyncio.to_thread(client.request, "GET", "/v2/tasks") == {}
        assert names.asked == ["peer.test"]
        head = peer.requests[0].decode().lower()
        assert f"host: peer.test:{peer.port}\r\n" in head
        assert f"authorization: bearer {TOKEN}".lower() in head
        assert "accept-encoding" not in head and "user-agent" not in head

        names.names["peer.test"] = ("127.0.0.1", "169.254.169.254")  # rebound since
        err = await fails(client)
        assert err.code == "peer_address_refused" and "metadata" in err.message
        assert len(peer.requests) == 1


async def test_a_redirect_is_not_followed_and_the_token_goes_nowhere_else() -> None:
    async with Peer().running() as elsewhere:
        redirect = (f"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:"
                    f"{elsewhere.port}/v2/tasks\r\nContent-Length: 0\r\n\r\n").encode()
        async with Peer(redirect).running() as peer:
            client = BlockingV2Transport(f"http://127.0.0.1:{peer.port}", TOKEN,
                                         guard=OutboundGuard(CONFIGURED), timeout=5)
            err = await fails(client)
    assert err.code == "peer_error" and "redirected (not followed)" in err.message
    assert len(peer.requests) == 1 and elsewhere.requests == []


async def test_https_verifies_the_certificate(tmp_path: Path) -> None:
    ca, cert, key = make_ca_and_cert(tmp_path, "peer")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    async with Peer().running(server) as peer:
        url = f"https://127.0.0.1:{peer.port}"
        pinned = ssl.create_default_context(cafile=str(ca))
        trusted = BlockingV2Transport(url, TOKEN, guard=OutboundGuard(CONFIGURED), tls=pinned)
        assert await asyncio.to_thread(trusted.request, "GET", "/v2/tasks") == {}
        untrusted = BlockingV2Transport(url, TOKEN, guard=OutboundGuard(CONFIGURED))
        err = await fails(untrusted)
        assert err.code == "peer_tls_error" and "certificate not trusted" in err.message
        code, _, out = await run_cli("tasks", "get", url, "x", token=TOKEN)
        assert code == 1 and "butler: peer_tls_error: " in out, out
        assert "Traceback" not in out and TOKEN not in out
        assert len(peer.requests) == 1, "only the trusting client got as far as a request"


async def test_the_cli_says_why_in_one_line() -> None:
    async with Peer().running() as peer:
        port = peer.port
    cases = {  # argv -> the error code butler prints
        ("send", f"http://127.0.0.1:{port}", "hi"): "peer_unreachable",  # nothing listens
        ("send", "http://169.254.169.254/", "hi"): "peer_address_refused",
        ("tasks", "get", f"http://[::ffff:169.254.169.254]:{port}", "x"): "peer_address_refused",
        ("tasks", "list", "http://no-such-host.invalid:80"): "peer_unreachable",
    }
    for argv, code in cases.items():
        status, out, err = await run_cli(*argv, token=TOKEN)
        assert status == 1, (argv, out, err)
        assert re.fullmatch(rf"butler: {code}: [^\n]+\n", err), (argv, err)
        assert TOKEN not in err





async def test_a_peers_error_message_cannot_forge_lines_or_rewrite_the_terminal() -> None:
    body = (b'{"error": {"code": "bad\\u001b[31m", "message": '
            b'"one\\nbutler: ok: forged\\u001b]0;title\\u0007"}}')
    reply = b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    async with Peer(reply).running() as peer:
        code, _, err = await run_cli("tasks", "get", f"http://127.0.0.1:{peer.port}", "x",
                                     token=TOKEN)
    assert code == 1 and re.fullmatch(r"butler: peer_error: [^\n]+\n", err), err
    assert "\x1b" not in err and "\x07" not in err and "forged" in err

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
EVENT = b'event: status\ndata: {"state": "completed"}\n\n'


class QuietStream(Peer):
    """Sends ``first``, stays quiet until ``quiet`` is set (as a task may), then ``rest``."""

    def __init__(self, quiet: asyncio.Event, first: bytes, rest: bytes) -> None:
        super().__init__()
        self.quiet, self.first, self.rest = quiet, first, rest

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(self.first)
        await writer.drain()
        await self.quiet.wait()
        writer.write(self.rest)
        await writer.drain()
        writer.close()


def stream_client(peer: Peer, *, timeout: float,
                  connect_timeout: float = 3.0) -> BlockingV2Transport:
    return BlockingV2Transport(f"http://127.0.0.1:{peer.port}", TOKEN,
                               guard=OutboundGuard(CONFIGURED), timeout=timeout,
                               connect_timeout=connect_timeout)


async def test_a_quiet_event_stream_is_not_timed_out() -> None:
    """Only the head of a stream is timed: a task may be quiet longer than any limit."""
    quiet = asyncio.Event()
    async with QuietStream(quiet, HEAD, EVENT).running() as peer:
        client = stream_client(peer, connect_timeout=0.05, timeout=0.05)
        events = asyncio.create_task(asyncio.to_thread(lambda: list(client.events("t"))))
        # Longer than both limits, then the event; a limit would have ended the wait.
        await asyncio.sleep(0.5)  # the task's quiet time, not a synchronisation
        quiet.set()
        assert await asyncio.wait_for(events, 10) == [("status", {"state": "completed"})]


async def test_the_head_of_an_event_stream_is_timed() -> None:
    quiet = asyncio.Event()
    async with QuietStream(quiet, HEAD[:17], HEAD[17:] + EVENT).running() as peer:
        client = stream_client(peer, timeout=0.2)
        try:
            with pytest.raises(DelegationFailed) as info:
                await asyncio.wait_for(asyncio.to_thread(lambda: list(client.events("t"))), 10)
        finally:
            quiet.set()  # else a client still waiting would never end
    assert info.value.code == "peer_timeout"
