"""A listening port of our own (internal/http/_accepting.py): every accepted connection
holds its place until it is gone, whatever ends it, and running out of descriptors
pauses accepting instead of spinning or crashing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from internal.http import IncidentLog, ListenSettings, Port, PortConnections
from internal.http._accepting import open_port
from internal.shares import Held
from tests.support import wait_until
from tests.test_tls import make_ca_and_cert


class _Echo(asyncio.Protocol):
    def __init__(self, place: Held) -> None:
        self.place = place
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.place.release()


@pytest.fixture
async def incidents() -> AsyncIterator[IncidentLog]:
    log = IncidentLog(logging.getLogger("test.accepting"))
    yield log
    log.close()


def _port(settings: ListenSettings, incidents: IncidentLog) -> Port:
    return open_port(settings, PortConnections(settings.max_connections, None, incidents),
                     _Echo, refusal=b"full\n")


async def test_out_of_descriptors_pauses_accepting_then_serves(
        incidents: IncidentLog) -> None:
    port = _port(ListenSettings("127.0.0.1", 0, max_connections=8), incidents)
    address = port.sockets[0].getsockname()
    # Completed by the kernel, waiting in the accept queue: the loop has not run since.
    client = socket.create_connection(address)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Every descriptor number the process may have taken: none left for accept().
    resource.setrlimit(resource.RLIMIT_NOFILE, (client.fileno() + 1, hard))
    taken = []
    try:
        with contextlib.suppress(OSError):
            while True:
                taken.append(os.open(os.devnull, os.O_RDONLY))
        await wait_until(lambda: incidents.totals["accept_failed"] == 1,
                         what="accept() failed for want of a descriptor")
        assert not port.is_serving()  # paused, not spinning on the error
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    reader, writer = await asyncio.open_connection(sock=client)
    try:
        await wait_until(port.is_serving, what="accepting again after the pause")
        writer.write(b"ping")
        async with asyncio.timeout(5):
            assert await reader.readexactly(4) == b"ping"
        writer.close()
        await wait_until(lambda: port.connections.in_use == 0, what="its place given back")
        assert incidents.totals["accept_failed"] == 1
    finally:
        writer.close()
        port.close()
        await port.wait_closed()


async def test_a_failed_or_unfinished_tls_handshake_gives_its_place_back(
        incidents: IncidentLog, tmp_path: Path) -> None:
    _, cert, key = make_ca_and_cert(tmp_path, "port")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    port = _port(ListenSettings("127.0.0.1", 0, max_connections=8, tls=tls), incidents)
    address = port.sockets[0].getsockname()
    try:
        # Garbage instead of a ClientHello: the handshake fails, the place is given back.
        reader, writer = await asyncio.open_connection(*address)
        await wait_until(lambda: port.connections.in_use == 1, what="counted on accept")
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        async with asyncio.timeout(5):
            await reader.read()
        writer.close()
        await wait_until(lambda: port.connections.in_use == 0, what="given back")
        # Silent, then the port closes while it is still in its handshake.
        _, writer = await asyncio.open_connection(*address)
        await wait_until(lambda: port.connections.in_use == 1, what="counted on accept")
    finally:
        port.close()
        await port.wait_closed()
    assert port.connections.in_use == 0
    assert not port.sockets
    writer.close()


async def test_past_the_cap_the_refusal_is_written_and_the_connection_closed(
        incidents: IncidentLog) -> None:
    port = _port(ListenSettings("127.0.0.1", 0, max_connections=1), incidents)
    address = port.sockets[0].getsockname()
    try:
        held_reader, held = await asyncio.open_connection(*address)
        held.write(b"hi")
        assert await held_reader.readexactly(2) == b"hi"
        reader, writer = await asyncio.open_connection(*address)
        async with asyncio.timeout(5):
            assert await reader.read() == b"full\n"
        writer.close()
        assert incidents.totals["connection_cap"] == 1
        assert port.connections.in_use == 1
        held.close()
    finally:
        port.close()
        await port.wait_closed()


async def test_a_port_closed_as_it_accepts_gives_the_places_back(
        incidents: IncidentLog) -> None:
    """The port closes in the loop pass right after the one that accepted: the connections'
    set-up has not begun (cancelled before their first step), yet each gives its place back
    and its socket is closed, not left to the collector."""
    loop = asyncio.get_running_loop()
    port = _port(ListenSettings("127.0.0.1", 0, max_connections=8), incidents)
    address = port.sockets[0].getsockname()
    # Completed by the kernel: the listening socket is readable at the loop's next pass.
    clients = [socket.create_connection(address) for _ in range(3)]
    closed: asyncio.Future[None] = loop.create_future()

    def close() -> None:
        port.close()
        closed.set_result(None)

    def close_after_accepting() -> None:
        # Runs in the next pass before the accept callback; the close, one pass later,
        # before the accepted connections' tasks take their first step.
        loop.call_soon(close)

    loop.call_soon(close_after_accepting)
    try:
        await closed
        await port.wait_closed()
        assert port.connections.in_use == 0
        for client in clients:
            client.settimeout(5)
            assert client.recv(1) == b""  # closed by the port
    finally:
        for client in clients:
            client.close()


async def test_a_port_closed_as_a_tls_handshake_ends_leaves_the_socket_to_its_transport(
        incidents: IncidentLog, tmp_path: Path) -> None:
    """The handshake completes and the port closes at that moment (here, from the
    protocol's ``connection_made``): the connection's transport, still registered with the
    loop, closes its socket. Closed under it, the socket's number went to the next socket
    made, which the loop then refused as "used by transport"."""
    ca, cert, key = make_ca_and_cert(tmp_path, "port")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    ports: list[Port] = []

    class ClosesThePort(_Echo):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            ports[0].close()

    ports.append(open_port(ListenSettings("127.0.0.1", 0, max_connections=8, tls=tls),
                           PortConnections(8, None, incidents), ClosesThePort))
    address = ports[0].sockets[0].getsockname()
    client = ssl.create_default_context(cafile=str(ca))
    # Kept open: the server's transport waits for its close_notify meanwhile.
    _, kept = await asyncio.open_connection(*address, ssl=client, server_hostname="127.0.0.1")
    other = None
    try:
        await ports[0].wait_closed()
        await wait_until(lambda: ports[0].connections.in_use == 0, what="its place given back")
        other = _port(ListenSettings("127.0.0.1", 0, max_connections=8), incidents)
        reader, writer = await asyncio.open_connection(*other.sockets[0].getsockname())
        writer.write(b"ping")
        async with asyncio.timeout(5):
            assert await reader.readexactly(4) == b"ping"
        writer.close()
    finally:
        kept.close()
        if other is not None:
            other.close()
            await other.wait_closed()
