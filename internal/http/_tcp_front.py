"""A front for a server that does its own accept() (gRPC): the public port is ours, and
each connection is admitted as the HTTP listener admits one before it costs anything.

grpcio offers no hook per connection (only a total cap), so it listens on a unix socket
of its own, in a directory only the daemon's user may enter (a loopback TCP port would
take any local process's connections past every cap), and this front carries bytes to it.
A connection is taken into the port's ``PortConnections`` (the total cap and one
address's share; past them it is closed, which a gRPC client sees as ``UNAVAILABLE``);
its opening bytes (the HTTP/2 preface, or a TLS record's header when the server
terminates TLS) must arrive within the header deadline, and only then is the upstream
connection opened, so an idle or slow connection costs one descriptor and a carried one
three (the client's socket, ours to the server, the server's). Both directions are then
spliced with backpressure: when one side's send buffer is full, the other side stops
being read, and a client that takes nothing from its full buffer within the header
deadline is cut. When either side closes, both are closed and nothing is kept.

The server sees every call as coming from one of the front's sockets, each bound to a name
of its own (never reused) that the server reports as the call's peer; ``RelayedPeers``
names the real address each of those sockets carries, so the per-address limits still
apply per client, and a call from a socket the front did not open can be refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
from dataclasses import dataclass

from internal.http._accepting import ListenSettings, Port, open_port
from internal.http._connections import PortConnections, peer_address
from internal.http._incidents import ACCEPT_FAILED, MALFORMED_HTTP, SLOW_HEADERS
from internal.shares import Held


@dataclass(frozen=True)
class Opening:
    """What a connection's first bytes must be before the front connects upstream: the
    first ``length`` bytes start with ``prefix``."""

    name: str
    prefix: bytes
    length: int

    def check(self, received: bytes) -> bool | None:
        """True: complete and right; False: wrong; None: right so far, wait for more."""
        if received[:len(self.prefix)] != self.prefix[:len(received)]:
            return False
        return True if len(received) >= self.length else None


HTTP2_PREFACE = Opening("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24)
# A TLS record header: handshake (22), version 3.x, then two bytes of length.
TLS_RECORD = Opening("TLS ClientHello", b"\x16\x03", 5)


class RelayedPeers:
    """The front's upstream sockets (the name each is bound to, as the server sees its
    peer) and the client address each carries."""

    def __init__(self) -> None:
        self._by_socket: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._by_socket)

    def address(self, name: str) -> str | None:
        """The client carried by the front's socket ``name``; None: not the front's."""
        return self._by_socket.get(name)

    def _add(self, name: str, address: str) -> None:
        self._by_socket[name] = address

    def _remove(self, name: str) -> None:
        self._by_socket.pop(name, None)


class _Client(asyncio.Protocol):
    """The public side of one connection."""

    def __init__(self, front: TcpFront, place: Held) -> None:
        self._front = front
        self.peers = front.peers
        self.transport: asyncio.Transport | None = None
        self.address = ""
        self._place: Held | None = place
        self._opening: bytearray | None = bytearray()  # until the upstream is open
        self._deadline: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._stalled: asyncio.TimerHandle | None = None
        self.upstream: _Upstream | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.address = peer_address(transport)
        self._front.clients.add(self)
        self._deadline = self._front.loop.call_later(self._front.settings.header_timeout_seconds,
                                                     self._too_slow)

    def data_received(self, data: bytes) -> None:
        if self._opening is None:
            if self.upstream is not None and self.upstream.transport is not None:
                self.upstream.transport.write(data)
            return
        self._opening += data
        if self.upstream is not None:  # connecting: paused, but a read may be in flight
            return
        opening = self._front.opening
        checked = opening.check(bytes(self._opening[:opening.length]))
        if checked is None:
            return
        if not checked:
            self._front.connections.incidents.report(
                MALFORMED_HTTP, f"closed a connection from {self.address}: not a "
                f"{opening.name}")
            self._close_now()
            return
        self._stop_deadline()
        assert self.transport is not None
        self.transport.pause_reading()
        self.upstream = _Upstream(self, self._front.socket_name())
        self._front.connecting(self)

    def upstream_open(self) -> None:
        """The upstream connection is open: what came so far goes to it, then everything."""
        assert self.upstream is not None and self.upstream.transport is not None
        opening, self._opening = self._opening, None
        if opening:
            self.upstream.transport.write(bytes(opening))
        if self.transport is not None:
            self.transport.resume_reading()

    def upstream_lost(self) -> None:
        """The server closed: what it sent is flushed to the client, for at most the
        header deadline (a client that stops reading cannot keep the socket)."""
        if self.closed or self.transport is None:
            return
        self.transport.close()
        self._linger = self._front.loop.call_later(
            self._front.settings.header_timeout_seconds, self._close_now)

    def _too_slow(self) -> None:
        self._deadline = None
        opening = self._front.opening
        self._front.connections.incidents.report(
            SLOW_HEADERS, f"closed a connection from {self.address}: no {opening.name} "
            f"within {self._front.settings.header_timeout_seconds:g}s "
            f"(server.header_timeout_seconds)")
        self._close_now()

    def _stop_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _close_now(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # Backpressure: the client's send buffer is full, so stop reading the server. Not
    # read, the server's closing is not seen either: a client that takes none of it
    # within the header deadline is cut (a gRPC client's transport reads all the time;
    # HTTP/2 flow control, not TCP, is how it slows the server down).
    def pause_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()
        if self._stalled is None:
            self._stalled = self._front.loop.call_later(
                self._front.settings.header_timeout_seconds, self._close_now)

    def resume_writing(self) -> None:
        self._stop_stalled()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.resume_reading()

    def _stop_stalled(self) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        self._stop_deadline()
        self._stop_stalled()
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        self._opening = None
        if self._place is not None:
            self._place.release()
            self._place = None
        self._front.clients.discard(self)
        if self.upstream is not None:
            self.upstream.client_lost()
        self.transport = None


class _Upstream(asyncio.Protocol):
    """The front's connection to the server, carrying one client."""

    def __init__(self, client: _Client, name: str) -> None:
        self.client = client
        self.name = name  # the socket's own, which the server sees as its peer
        self.transport: asyncio.Transport | None = None
        self._named = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.client.closed:
            transport.abort()
            return
        self.client.peers._add(self.name, self.client.address)
        self._named = True
        self.client.upstream_open()

    def data_received(self, data: bytes) -> None:
        if self.client.transport is not None:
            self.client.transport.write(data)

    def client_lost(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # Backpressure: the server's send buffer is full, so stop reading the client.
    def pause_writing(self) -> None:
        if self.client.transport is not None:
            self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.client.transport is not None:
            self.client.transport.resume_reading()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._named:
            self.client.peers._remove(self.name)
            self._named = False
        self.transport = None
        self.client.upstream_lost()


class TcpFront:
    def __init__(self, settings: ListenSettings, upstream: str, opening: Opening,
                 connections: PortConnections, peers: RelayedPeers) -> None:
        """``upstream``: the server's unix socket, in a directory only this user may enter
        (the front's own sockets are named there too)."""
        self.settings = settings
        self.upstream = upstream
        self.opening = opening
        self.connections = connections
        self.peers = peers
        self.clients: set[_Client] = set()
        self.loop = asyncio.get_running_loop()
        self._server: Port | None = None
        self._connecting: set[asyncio.Task[None]] = set()
        self._names = itertools.count()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        # Past the cap or the address's share, a connection is closed as it is accepted.
        self._server = open_port(self.settings, self.connections,
                                 lambda place: _Client(self, place))

    def socket_name(self) -> str:
        """A name for the front's next socket to the server, never used before."""
        return os.path.join(os.path.dirname(self.upstream), f"c{next(self._names)}")

    def connecting(self, client: _Client) -> None:
        task = self.loop.create_task(self._connect(client))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _connect(self, client: _Client) -> None:
        upstream = client.upstream
        assert upstream is not None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.bind(upstream.name)  # the name the server sees as this socket's peer
            try:
                await self.loop.sock_connect(sock, self.upstream)
            finally:  # the socket keeps its name; the file is not needed
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(upstream.name)
            await self.loop.create_unix_connection(lambda: upstream, sock=sock)
        except BaseException as exc:
            sock.close()
            if not isinstance(exc, OSError):
                raise
            # Each client that finds no server says so: one line a minute, however many.
            # Named by its socket: the public port is gone once the front stops accepting.
            self.connections.incidents.report(
                ACCEPT_FAILED, f"cannot reach the server at {self.upstream}: {exc}")
            if client.transport is not None:
                client.transport.abort()

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """No new connections; the open ones cut (the server behind has ended its calls)."""
        self.stop_accepting()
        for task in list(self._connecting):
            task.cancel()
        for client in list(self.clients):
            if client.transport is not None:
                client.transport.abort()
        if self._connecting:
            await asyncio.gather(*self._connecting, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
