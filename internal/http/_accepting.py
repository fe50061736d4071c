"""A listening port whose connections take their place as they are accepted.

asyncio's ``create_server`` builds a task, a transport and a protocol for each connection
it accepts, and under TLS completes the handshake, before the protocol learns the peer's
address: a connection past the port's cap or its address's share could be refused only
after all that, and under TLS one still in its handshake held a descriptor without being
counted at all. Here each accepted socket first takes its place in the port's
``PortConnections``. One refused costs an ``accept()``, a short write (the port's refusal:
plain HTTP's 503; nothing under TLS or before gRPC) and a ``close()``. One admitted is
handed to asyncio (``connect_accepted_socket``: its transport, and the TLS handshake
within the header deadline) with its place, which its protocol gives back when the
connection is lost, or this port when the connection fails before that.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from internal.http._connections import PortConnections
from internal.http._incidents import ACCEPT_FAILED
from internal.shares import Held

log = logging.getLogger("butler.http")

# Sockets accepted per wake-up of the listening socket: a burst is taken in a few passes of
# the loop rather than one long one.
BATCH = 64
# Out of descriptors or memory: accept() is retried after this long, as asyncio does.
RETRY_SECONDS = 1.0
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

ConnectionProtocol = Callable[[Held], asyncio.Protocol]


@dataclass(frozen=True)
class ListenSettings:
    """How a port listens: its address, its connections and their deadlines, its TLS."""

    host: str
    port: int
    max_connections: int = 256
    # One address's part of them (None: the shares' default, three quarters).
    max_connections_per_address: int | None = None
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    tls: ssl.SSLContext | None = None

    def handler_args(self) -> dict[str, Any]:
        """Per-connection settings. aiohttp's keep-alive timer starts when a connection
        opens and again after each response, and closes it if no complete request head
        arrived: that is the header timeout. After an error reply to a request whose body
        was not read (413, 408), the rest of the body is drained for at most the body
        timeout."""
        return {
            "access_log": None,
            "keepalive_timeout": self.header_timeout_seconds,
            "lingering_time": min(10.0, self.body_timeout_seconds),
        }


class Port:
    def __init__(self, sock: socket.socket, connections: PortConnections,
                 protocol: ConnectionProtocol, settings: ListenSettings,
                 refusal: bytes) -> None:
        """``protocol(place)``: the protocol for an admitted connection, which releases
        ``place`` when the connection is lost. ``refusal``: written to a refused one before
        it is closed (ignored under TLS)."""
        self.connections = connections
        self._sock = sock
        self._protocol = protocol
        self._settings = settings
        self._refusal = b"" if settings.tls is not None else refusal
        self._loop = asyncio.get_running_loop()
        self._listening = False
        self._serving = False
        self._retry: asyncio.TimerHandle | None = None
        self._connecting: set[asyncio.Task[None]] = set()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self._sock,) if self._sock.fileno() >= 0 else ()

    def is_serving(self) -> bool:
        return self._serving

    def start_serving(self) -> None:
        self._retry = None
        if not self._serving and self._sock.fileno() >= 0:
            if not self._listening:  # until now a connection is refused by the kernel
                # A deep accept queue: a burst past the cap is accepted and refused at
                # once. With a queue only as deep as the cap, the kernel dropped the rest
                # of the burst mid-handshake and those clients hung for up to ~30 s of
                # SYN-ACK retries.
                self._sock.listen(max(self._settings.max_connections, socket.SOMAXCONN))
                self._listening = True
            self._serving = True
            self._loop.add_reader(self._sock.fileno(), self._accept)

    def close(self) -> None:
        """No new connections; those still being set up (a TLS handshake) are dropped.
        Connections already handed over are their protocols' to close."""
        self._stop_accepting()
        self._sock.close()
        for task in self._connecting:
            task.cancel()

    async def wait_closed(self) -> None:
        if self._connecting:
            await asyncio.gather(*self._connecting, return_exceptions=True)

    def _stop_accepting(self) -> None:
        if self._serving:
            self._serving = False
            self._loop.remove_reader(self._sock.fileno())
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def _accept(self) -> None:
        for _ in range(BATCH):
            try:
                conn, address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:  # gone before it was taken
                continue
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                self._out_of_resources(exc)
                return
            place = self.connections.take(str(address[0]))
            if place is None:  # past the cap or the address's share (reported)
                self._refuse(conn)
            else:
                self._hand_over(conn, place)

    def _refuse(self, conn: socket.socket) -> None:
        try:
            if self._refusal:
                conn.setblocking(False)
                conn.send(self._refusal)  # a new socket's buffer takes it whole
        except OSError:
            pass  # the client is gone already: nothing to tell it
        finally:
            conn.close()

    def _hand_over(self, conn: socket.socket, place: Held) -> None:
        handover = _Handover(conn, place, self._protocol)
        task = self._loop.create_task(self._connect(handover))
        self._connecting.add(task)

        def done(task: asyncio.Task[None]) -> None:
            self._connecting.discard(task)
            # Cancelled by the port's closing, perhaps before its first step (when
            # ``_connect`` never ran to give up itself).
            if task.cancelled():
                handover.give_up()

        task.add_done_callback(done)

    async def _connect(self, handover: _Handover) -> None:
        tls = self._settings.tls
        try:
            handover.conn.setblocking(False)
            # A client that never finishes the TLS handshake is as slow as one that never
            # sends its request head: same deadline.
            await self._loop.connect_accepted_socket(
                handover.protocol, handover.conn, ssl=tls,
                ssl_handshake_timeout=(self._settings.header_timeout_seconds
                                       if tls is not None else None))
        except OSError:  # the client's doing: a reset, a failed or too slow handshake
            handover.give_up()
        except Exception:
            handover.give_up()
            log.exception("cannot set up a connection")

    def _out_of_resources(self, exc: OSError) -> None:
        """As asyncio does: stop accepting for a while rather than spin on the error."""
        self.connections.incidents.report(
            ACCEPT_FAILED, f"cannot accept connections on port "
            f"{self._sock.getsockname()[1]}: {exc.strerror}; retrying in {RETRY_SECONDS:g}s")
        self._stop_accepting()
        self._retry = self._loop.call_later(RETRY_SECONDS, self.start_serving)


class _Handover:
    """An admitted socket on its way to asyncio, with its place."""

    def __init__(self, conn: socket.socket, place: Held,
                 protocol: ConnectionProtocol) -> None:
        self.conn = conn
        self._place = place
        self._protocol = protocol
        # Made by asyncio just before the transport, which from then on closes the socket
        # whatever happens (a failed handshake, a cancelled set-up).
        self._transport_owns_it = False

    def protocol(self) -> asyncio.Protocol:
        made = self._protocol(self._place)
        self._transport_owns_it = True
        return made

    def give_up(self) -> None:
        self._place.release()
        if not self._transport_owns_it:
            # Closed under a transport still registered with the loop (one shutting its
            # TLS session down), the socket's number would go to the next socket made,
            # which the loop then refuses as "used by transport".
            self.conn.close()


def open_port(settings: ListenSettings, connections: PortConnections,
              protocol: ConnectionProtocol, *, refusal: bytes = b"",
              serving: bool = True) -> Port:
    """Bind ``settings.host:port``; with ``serving=False`` its number is known but it does
    not listen (a connection is refused) until ``start_serving``."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.setblocking(False)
        try:
            sock.bind((settings.host, settings.port))
        except OSError as exc:
            raise OSError(exc.errno, f"error while attempting to bind on address "
                          f"{(settings.host, settings.port)!r}: {exc.strerror}") from None
    except BaseException:
        sock.close()
        raise
    port = Port(sock, connections, protocol, settings, refusal)
    if serving:
        port.start_serving()
    return port
