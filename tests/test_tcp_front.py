"""The gRPC port's front on its own (internal/http/_tcp_front.py), before a plain TCP
server: a client that stops reading stops the server being read, so the front holds no
more than a socket buffer's worth for it; every byte still arrives, in order."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from pathlib import Path

from internal.http import (
    HTTP2_PREFACE,
    IncidentLog,
    ListenSettings,
    PortConnections,
    RelayedPeers,
    TcpFront,
)
from tests.support import wait_until

PREFACE = HTTP2_PREFACE.prefix
CHUNK = 64 * 1024
CHUNKS = 256  # 16 MiB: far more than the sockets' buffers


async def test_a_client_that_stops_reading_stops_the_server_being_read(tmp_path: Path) -> None:
    sent = 0

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        assert await reader.readexactly(len(PREFACE)) == PREFACE
        for i in range(CHUNKS):
            writer.write(bytes([i % 256]) * CHUNK)
            await writer.drain()
            sent += CHUNK
        writer.close()

    server = await asyncio.start_unix_server(talk, tmp_path / "server.sock")
    peers = RelayedPeers()
    front = TcpFront(ListenSettings("127.0.0.1", 0, max_connections=4),
                     str(tmp_path / "server.sock"), HTTP2_PREFACE,
                     PortConnections(4, None, IncidentLog(logging.getLogger("test"))), peers)
    await front.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port, limit=CHUNK)
        writer.write(PREFACE)
        (client,) = front.clients
        # Reading nothing: the front stops reading the server once its buffer is full.
        await wait_until(lambda: client.upstream is not None and client.upstream.transport
                         is not None and not client.upstream.transport.is_reading(),
                         what="the server no longer read")
        assert client.transport is not None
        assert client.transport.get_write_buffer_size() <= 2 * CHUNK
        assert sent < CHUNKS * CHUNK
        assert len(peers) == 1
        received = bytearray()
        async with asyncio.timeout(60):
            while data := await reader.read(CHUNK):
                received += data
        assert len(received) == CHUNKS * CHUNK
        assert all(received[i * CHUNK] == i % 256 for i in range(CHUNKS))
        writer.close()
        await wait_until(lambda: not front.clients and not peers and
                         front.connections.in_use == 0, what="everything given back")
    finally:
        await front.close()
        server.close()


async def test_a_client_that_finds_no_server_while_the_front_stops_is_closed(
        tmp_path: Path) -> None:
    """A daemon stopping stops the front accepting, then gRPC: a client admitted before
    that sends its preface meanwhile finds no server, and is closed at once (naming the
    port in the warning raised IndexError once the listening socket was closed, and the
    client stayed open until the front closed)."""
    front = TcpFront(ListenSettings("127.0.0.1", 0, max_connections=4),
                     str(tmp_path / "gone.sock"), HTTP2_PREFACE,
                     PortConnections(4, None, IncidentLog(logging.getLogger("test"))),
                     RelayedPeers())
    await front.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        await wait_until(lambda: front.clients, what="the client admitted")
        front.stop_accepting()
        writer.write(PREFACE)
        async with asyncio.timeout(10):
            with contextlib.suppress(ConnectionResetError):  # closed, or cut
                assert await reader.read() == b""
        writer.close()
        await wait_until(lambda: not front.clients and front.connections.in_use == 0,
                         what="its place given back")
        # An incident (one line a minute however many clients), not a line per client.
        assert front.connections.incidents.totals["accept_failed"] == 1
    finally:
        await front.close()



async def test_a_client_that_stops_reading_is_cut_when_the_server_has_closed(
        tmp_path: Path) -> None:
    """The server sent more than the sockets hold, then closed. The front, which stopped
    reading it while the client read nothing, never saw it close: the client kept its
    place and both sockets for good. A client whose socket takes nothing of what waits
    for it within the header deadline is cut."""
    done_with = asyncio.Event()

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await reader.readexactly(len(PREFACE)) == PREFACE
        writer.write(b"x" * CHUNK * CHUNKS)
        await done_with.wait()
        writer.transport.abort()  # as gRPC closes a connection it is done with

    server = await asyncio.start_unix_server(talk, tmp_path / "server.sock")
    peers = RelayedPeers()
    front = TcpFront(ListenSettings("127.0.0.1", 0, max_connections=4,
                                    header_timeout_seconds=0.5),
                     str(tmp_path / "server.sock"), HTTP2_PREFACE,
                     PortConnections(4, None, IncidentLog(logging.getLogger("test"))), peers)
    await front.start()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once
    try:
        sock.connect(("127.0.0.1", front.port))
        _, writer = await asyncio.open_connection(sock=sock, limit=CHUNK)
        writer.write(PREFACE)  # and reads nothing past its stream's buffer
        (client,) = await wait_until(lambda: front.clients, what="the client admitted")
        await wait_until(lambda: client.upstream is not None and client.upstream.transport
                         is not None and not client.upstream.transport.is_reading(),
                         what="the server no longer read")
        done_with.set()
        await wait_until(lambda: not front.clients and not peers and
                         front.connections.in_use == 0, what="the client cut")
        writer.close()
    finally:
        sock.close()
        await front.close()
        server.close()
