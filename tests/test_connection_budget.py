"""Connections are budgeted before they cost (issue 36): one address holds at most its
share of a port's connections, a gRPC connection that never calls is closed after the
header deadline, and the daemon raises its descriptor limit at start."""

from __future__ import annotations

import asyncio
import os
import resource

import pytest
from aiohttp import web

from tests.raw_http import get_healthz
from tests.support import Instance, Swarm, left_for_the_collector, wait_until

SERVER = {"server": {"max_connections": 8, "header_timeout_seconds": 0.5}}


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def connect_from(inst: Instance, source: str, port: int | None = None,
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port or inst.daemon.port,
                                         local_addr=(source, 0))


async def test_one_address_cannot_hold_every_connection(swarm: Swarm) -> None:
    home = await swarm.start("home", extra={"server": {"max_connections": 8}})
    baseline = open_fds()
    flood = [await connect_from(home, "127.0.0.2") for _ in range(6)]  # its share: 6 of 8
    try:
        for reader, writer in flood:
            assert await get_healthz(reader, writer) == 200
        reader, writer = await connect_from(home, "127.0.0.2")
        async with asyncio.timeout(10):
            refused = await reader.read()
        writer.close()
        assert refused.startswith(b"HTTP/1.1 503") and b'"overloaded"' in refused
        for _ in range(2):  # everyone else still gets in
            reader, writer = await connect_from(home, "127.0.0.1")
            assert await get_healthz(reader, writer) == 200
            writer.close()
    finally:
        for _, writer in flood:
            writer.close()
    await wait_until(lambda: open_fds() <= baseline + 2, what="descriptors back")


async def test_a_refused_connection_is_freed_once_closed(swarm: Swarm) -> None:
    """A connection refused past the address's share leaves no request handler for the
    cycle collector (the handler and its request parser refer to each other until
    aiohttp's teardown parts them): a flood of reconnects kept them all until the next
    collection, a long stop of the loop for every caller."""
    home = await swarm.start("home", extra={"server": {"max_connections": 8}})
    held = [await connect_from(home, "127.0.0.2") for _ in range(6)]  # its share: 6 of 8
    try:
        for reader, writer in held:
            assert await get_healthz(reader, writer) == 200
        with left_for_the_collector() as left:
            for _ in range(10):
                reader, writer = await connect_from(home, "127.0.0.2")
                async with asyncio.timeout(10):
                    assert (await reader.read()).startswith(b"HTTP/1.1 503")
                writer.close()
                await writer.wait_closed()
    finally:
        for _, writer in held:
            writer.close()
    assert [o for o in left if isinstance(o, web.RequestHandler)] == []


async def test_a_grpc_connection_that_never_calls_is_closed(swarm: Swarm) -> None:
    pytest.importorskip("grpc")
    from tests.test_a2a_grpc import GRPC

    home = await swarm.start("home", configurations=GRPC, extra=SERVER)
    port = home.daemon.grpc_port
    assert port is not None
    baseline = open_fds()
    idle = [await connect_from(home, "127.0.0.1", port) for _ in range(20)]
    for reader, writer in idle:  # no HTTP/2 preface: cut off at the handshake deadline
        async with asyncio.timeout(30):
            while await reader.read(4096):
                pass
        writer.close()
    await wait_until(lambda: open_fds() <= baseline + 2, what="descriptors back")


async def test_the_descriptor_limit_is_raised_at_start(swarm: Swarm) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    await swarm.start("home")
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == (
        hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20))


def test_a_grpc_port_costs_three_descriptors_more_per_connection() -> None:
    from butler.runtime.fd_limit import RESERVE, connection_budget

    assert connection_budget(256, 1024) == 256
    # Each of the 256 an HTTP connection and a fronted gRPC one: 4 descriptors.
    assert connection_budget(256, 1024, grpc=True) == (1024 - RESERVE) // 4
    assert connection_budget(256, 256 * 4 + RESERVE, grpc=True) == 256
    assert connection_budget(256, None, grpc=True) == 256
