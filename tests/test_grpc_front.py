"""The gRPC port is budgeted as the HTTP port is (issue 36): a front of ours accepts each
connection within the total cap and one address's share of it, wants the HTTP/2 preface
within the header deadline before it connects to gRPC's own (unix) socket, and tells the
binding which client each of its sockets carries, so per-address limits still see the
real address and a call that did not come through the front is refused."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grpc", reason="the gRPC binding needs the grpc extra "
                                   "(pip install 'butler-a2a[grpc]')")

import grpc
from a2a.types import GetTaskRequest, TaskState

from internal.http import TcpFront
from tests.a2a_support import send_request, send_task, text, user_message
from tests.grpc_support import channel, grpc_client
from tests.support import (
    Instance,
    ServeProcess,
    Swarm,
    config_dict,
    wait_until,
    write_config,
)
from tests.test_a2a_grpc import GRPC, error_info
from tests.test_a2a_grpc_admission import grpc_card
from tests.test_card import _ipv6_loopback
from tests.test_connection_budget import open_fds

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def front_of(inst: Instance) -> TcpFront:
    assert inst.daemon.grpc_front is not None
    return inst.daemon.grpc_front


async def connect_from(inst: Instance, source: str) -> Stream:
    return await asyncio.open_connection("127.0.0.1", front_of(inst).port,
                                         local_addr=(source, 0))


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server closed the connection (reads to its end)."""
    async with asyncio.timeout(30):
        try:
            while await reader.read(4096):
                pass
        except ConnectionResetError:
            pass
    return True


@contextlib.asynccontextmanager
async def relay_from(source: str, port: int) -> AsyncIterator[str]:
    """A plain TCP relay to ``127.0.0.1:port`` whose connections come from ``source``:
    a gRPC client behind it reaches the daemon as a client at ``source`` (gRPC's own
    channels cannot choose their source address). Yields its target for a channel."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port,
                                                             local_addr=(source, 0))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(carry, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def test_one_address_flooding_idle_connections_leaves_room_for_others(
        swarm: Swarm) -> None:
    home = await swarm.start("home", configurations=GRPC,
                             extra={"server": {"max_connections": 8,
                                               "header_timeout_seconds": 60}})
    front = front_of(home)
    baseline = open_fds()
    flood = [await connect_from(home, "127.0.0.2") for _ in range(10)]  # its share: 6 of 8
    try:
        await wait_until(lambda: home.daemon.incidents.totals["connection_cap"] == 4,
                         what="the 4 past the share refused")
        assert front.connections.held_by("127.0.0.2") == 6
        calls = 0
        async with grpc_client(home) as client:  # from 127.0.0.1, meanwhile
            for _ in range(5):
                task = await send_task(client, send_request(user_message(text("hello"))))
                assert task.status.state == TaskState.TASK_STATE_COMPLETED
                got = await client.get_task(GetTaskRequest(id=task.id))
                assert got.id == task.id
                calls += 2
        assert calls == 10
        assert front.connections.held_by("127.0.0.2") == 6  # the flood is still open
    finally:
        for _, writer in flood:
            writer.close()
    await wait_until(lambda: front.connections.in_use == 0 and not front.peers,
                     what="every connection given back")
    await wait_until(lambda: open_fds() <= baseline + 5, what="descriptors back")


async def test_connections_past_the_total_are_closed(swarm: Swarm) -> None:
    home = await swarm.start("home", configurations=GRPC,
                             extra={"server": {"max_connections": 4,
                                               "max_connections_per_address": 2,
                                               "header_timeout_seconds": 60}})
    front = front_of(home)
    held = [await connect_from(home, source)
            for source in ("127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3")]
    try:
        await wait_until(lambda: front.connections.in_use == 4, what="4 open")
        reader, writer = await connect_from(home, "127.0.0.4")
        assert await closed_by_server(reader)
        writer.close()
        assert home.daemon.incidents.totals["connection_cap"] == 1
        assert home.daemon.grpc_url is not None
        async with channel(home.daemon.grpc_url, home.tokens["operator"]) as chan:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await grpc_card(home, chan)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert front.connections.in_use == 4
    finally:
        for _, writer in held:
            writer.close()
    await wait_until(lambda: front.connections.in_use == 0, what="every connection back")


async def test_a_connection_without_the_preface_is_closed_after_the_deadline(
        swarm: Swarm) -> None:
    home = await swarm.start("home", configurations=GRPC,
                             extra={"server": {"header_timeout_seconds": 0.5}})
    front = front_of(home)
    idle = await connect_from(home, "127.0.0.1")
    dribbling = await connect_from(home, "127.0.0.1")
    dribbling[1].write(b"PRI * HTTP/2.0\r\n")  # part of the preface, never the rest
    wrong = await connect_from(home, "127.0.0.1")
    wrong[1].write(b"GET / HTTP/1.1\r\n\r\n")
    for reader, writer in (idle, dribbling, wrong):
        assert await closed_by_server(reader)
        writer.close()
    assert home.daemon.incidents.totals["slow_headers"] == 2
    assert home.daemon.incidents.totals["malformed_http"] == 1
    assert not front.peers  # none of them reached gRPC
    await wait_until(lambda: front.connections.in_use == 0, what="every connection back")


async def test_per_address_buckets_see_the_client_address_through_the_front(
        swarm: Swarm) -> None:
    home = await swarm.start("home", configurations=GRPC, extra={"rate_limits": {
        "per_address_per_second": 0.001, "per_address_burst": 2,
        "per_caller_per_second": 0}})
    port = front_of(home).port
    token = home.tokens["operator"]

    async def codes(target: str) -> list[Any]:
        found = []
        async with channel(target, token) as chan:
            for _ in range(3):
                try:
                    await grpc_card(home, chan)
                    found.append(grpc.StatusCode.OK)
                except grpc.aio.AioRpcError as err:
                    found.append(err.code())
        return found

    limited = [grpc.StatusCode.OK] * 2 + [grpc.StatusCode.RESOURCE_EXHAUSTED]
    async with relay_from("127.0.0.2", port) as other:
        assert await codes(other) == limited
    assert await codes(f"127.0.0.1:{port}") == limited  # a bucket of its own


async def test_grpc_own_endpoint_is_reachable_only_by_the_daemon_user(swarm: Swarm) -> None:
    """On a loopback TCP port, gRPC took any local process's connections past every cap
    (300 held while the front's cap was 4): it listens on a unix socket in a directory
    only the daemon's user may enter, removed when the daemon stops."""
    home = await swarm.start("home", configurations=GRPC)
    endpoint = front_of(home).upstream
    assert isinstance(endpoint, str), f"gRPC listens on TCP {endpoint}: any local process " \
                                      "reaches it"
    assert stat.S_ISSOCK(os.stat(endpoint).st_mode)
    directory = os.stat(os.path.dirname(endpoint))
    assert stat.S_IMODE(directory.st_mode) == 0o700
    assert directory.st_uid == os.getuid()
    await swarm.stop(home)
    assert not os.path.exists(os.path.dirname(endpoint))


async def test_a_call_that_skips_the_front_is_refused(swarm: Swarm) -> None:
    home = await swarm.start("home", configurations=GRPC)
    internal = front_of(home).upstream
    async with channel(f"unix:{internal}", home.tokens["operator"]) as chan:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await grpc_card(home, chan)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error_info(caught.value).metadata["code"] == "forbidden"


async def test_large_messages_cross_the_front_both_ways(swarm: Swarm) -> None:
    """Many times the socket buffers, each way: nothing lost or reordered by the splice."""
    home = await swarm.start("home", configurations=GRPC,
                             extra={"server": {"max_body_bytes": 4 * 1024 * 1024}})
    parts = [" ".join(f"p{n}w{i}" for i in range(30_000)) for n in range(8)]  # about 2.2 MB
    async with grpc_client(home) as client:
        for _ in range(2):
            task = await send_task(client, send_request(user_message(*map(text, parts))))
            echoed = "".join(p.text for a in task.artifacts for p in a.parts)
            assert echoed.split() == " ".join(parts).split()  # echo joins the parts
    await wait_until(lambda: not front_of(home).peers, what="the connection closed")


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
async def test_an_ipv6_bound_grpc_port_is_fronted(swarm: Swarm) -> None:
    home = await swarm.start("home", configurations={"a2a": {"bind_address": "::1",
                                                             "grpc_port": 0}})
    front = front_of(home)
    assert home.daemon.grpc_url == f"[::1]:{front.port}"
    async with channel(home.daemon.grpc_url, home.tokens["operator"]) as chan:
        assert (await grpc_card(home, chan)).name == "home butler"
        assert front.connections.held_by("::1") == 1


def test_a_grpc_peer_names_the_socket_it_came_from() -> None:
    from internal.protocol.a2a.server.grpc_binding import peer_socket

    assert peer_socket("unix:/tmp/butler-grpc-x/3") == "/tmp/butler-grpc-x/3"
    assert peer_socket("unix:") is None  # a client socket with no name: not the front's
    assert peer_socket("ipv4:127.0.0.1:50123") is None
    assert peer_socket("") is None


async def test_a_killed_daemons_socket_directory_is_removed_at_the_next_start(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """gRPC's unix socket lives in a directory under $TMPDIR named by the daemon's pid; one
    killed with -9 cannot remove it, so the next daemon of the user does. Another's, whose
    process runs, is left alone."""
    # Short: a unix socket's path has at most 107 bytes, and tmp_path can be longer.
    tmp = Path(tempfile.mkdtemp(prefix="bg-"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    running = tmp / f"butler-grpc-{os.getpid()}-x"  # this test's process: it runs
    running.mkdir()
    cfg, _ = config_dict(tmp_path, "home", configurations={"a2a": {"grpc_port": 0}})
    path = write_config(tmp_path, "home", cfg)

    def directories() -> set[str]:
        return {p.name for p in tmp.glob("butler-grpc-*")}

    first = await ServeProcess.start(path, tmp_path / "first.log", TMPDIR=str(tmp))
    left = directories() - {running.name}
    assert [name.split("-")[2] for name in left] == [str(first.proc.pid)]
    await first.kill9()
    assert directories() == left | {running.name}  # nobody removed it
    second = await ServeProcess.start(path, tmp_path / "second.log", TMPDIR=str(tmp))
    try:
        (mine,) = directories() - {running.name}
        assert mine.split("-")[2] == str(second.proc.pid)
    finally:
        assert await second.stop() == 0
    assert directories() == {running.name}
