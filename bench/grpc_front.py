"""What the gRPC port's front costs per call: N unary calls one at a time (GetTask of a
finished task, and SendMessage to the echo skill), straight to a gRPC server's loopback
port and through the front (internal/http/_tcp_front.py), in alternating rounds on one
daemon, client and daemon in this process. And the front alone: a gRPC server whose one
method returns its request (64 bytes), straight and behind a ``TcpFront``, where the
front's share of each call is largest.

    PYTHONPATH=. .venv/bin/python bench/grpc_front.py [N] [ROUNDS]

Prints, per method and carrier, the median wall time per call and the process's CPU per
call (``time.process_time``: gRPC's threads included), then the ratios front/direct.
The direct server is a second gRPC server with the same binding and no front (its
calls are not resolved through the front's map, which is a dict lookup)."""

from __future__ import annotations

import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from a2a.types import GetTaskRequest

from butler.http_app import A2A_FRONT
from internal.http import (
    HTTP2_PREFACE,
    IncidentLog,
    ListenSettings,
    PortConnections,
    RelayedPeers,
    TcpFront,
)
from internal.protocol.a2a.server.grpc_binding import GrpcBinding, GrpcLimits, grpc_server
from tests.a2a_support import send_request, text, user_message
from tests.grpc_support import channel, service_stub
from tests.support import Swarm

V1 = [("a2a-version", "1.0")]
WARM_UP = 50
UNLIMITED = {"rate_limits": {"per_address_per_second": 0, "per_caller_per_second": 0}}


async def direct_server(inst: Any) -> tuple[grpc.aio.Server, int]:
    """gRPC as the daemon serves it (the same binding objects and server options), with
    no front: its calls are keyed by the peer's own address."""
    front, limits = inst.daemon.app[A2A_FRONT], inst.daemon.config.limits
    binding = GrpcBinding(front.v1, front.verifier, front.load_limits, streams=front.streams,
                          per_caller=front.per_caller)
    server = grpc_server(binding, GrpcLimits(
        max_message_bytes=limits.max_body_bytes,
        handshake_seconds=limits.header_timeout_seconds,
        idle_seconds=limits.header_timeout_seconds,
        max_streams_per_connection=limits.max_streams_per_caller))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def echo_behind_a_front() -> tuple[grpc.aio.Server, TcpFront, int]:
    async def echo(request: bytes, context: Any) -> bytes:
        return request

    server = grpc.aio.server(handlers=[grpc.method_handlers_generic_handler(
        "bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})])
    port = server.add_insecure_port("127.0.0.1:0")
    # The front carries to a unix socket, as the daemon's does; the direct calls take the port.
    internal = str(Path(tempfile.mkdtemp()) / "echo.sock")
    server.add_insecure_port(f"unix:{internal}")
    await server.start()
    front = TcpFront(ListenSettings("127.0.0.1", 0, max_connections=16),
                     internal, HTTP2_PREFACE,
                     PortConnections(16, None, IncidentLog(logging.getLogger("bench"))),
                     RelayedPeers())
    await front.start()
    return server, front, port


async def timed(call: Any, request: Any, n: int) -> tuple[list[float], float]:
    for _ in range(WARM_UP):
        await call(request, metadata=V1)
    times = []
    cpu = time.process_time()
    for _ in range(n):
        started = time.perf_counter()
        await call(request, metadata=V1)
        times.append(time.perf_counter() - started)
    return times, time.process_time() - cpu


async def main(n: int, rounds: int) -> None:
    async with aiohttp.ClientSession() as http:
        swarm = Swarm(Path(tempfile.mkdtemp()), http)
        try:
            home = await swarm.start("home", configurations={"a2a": {"grpc_port": 0}},
                                     extra=UNLIMITED)
            direct, direct_port = await direct_server(home)
            echo, echo_front, echo_port = await echo_behind_a_front()
            token = home.tokens["operator"]
            targets = {"direct": f"127.0.0.1:{direct_port}",
                       "front": f"127.0.0.1:{home.daemon.grpc_port}"}
            chans = {name: channel(target, token) for name, target in targets.items()}
            echo_chans = {"direct": grpc.aio.insecure_channel(f"127.0.0.1:{echo_port}"),
                          "front": grpc.aio.insecure_channel(f"127.0.0.1:{echo_front.port}")}
            stubs = {name: service_stub(chan) for name, chan in chans.items()}
            sent = await stubs["front"].SendMessage(
                send_request(user_message(text("hello"))), metadata=V1)
            methods = {"GetTask": GetTaskRequest(id=sent.task.id),
                       "SendMessage": send_request(user_message(text("hello"))),
                       "Echo": b"x" * 64}
            calls_of = {(m, name): getattr(stubs[name], m) for m in ("GetTask", "SendMessage")
                        for name in targets}
            for name, chan in echo_chans.items():
                calls_of[("Echo", name)] = chan.unary_unary("/bench.Echo/Echo")
            wall: dict[tuple[str, str], list[float]] = {}
            cpu: dict[tuple[str, str], float] = {}
            for r in range(rounds):
                order = ["direct", "front"] if r % 2 == 0 else ["front", "direct"]
                for method, request in methods.items():
                    for name in order:
                        times, used = await timed(calls_of[(method, name)], request, n)
                        wall.setdefault((method, name), []).extend(times)
                        cpu[(method, name)] = cpu.get((method, name), 0.0) + used
            for chan in [*chans.values(), *echo_chans.values()]:
                await chan.close()
            await direct.stop(None)
            await echo.stop(None)
            await echo_front.close()
        finally:
            await swarm.close()
    calls = n * rounds
    print(f"{calls} calls per method and carrier, one at a time, {rounds} alternating rounds")
    print(f"{'method':<12} {'carrier':<7} {'median ms':>10} {'cpu ms/call':>12}")
    for (method, name), times in sorted(wall.items()):
        print(f"{method:<12} {name:<7} {statistics.median(times) * 1000:>10.3f} "
              f"{cpu[(method, name)] / calls * 1000:>12.3f}")
    for method in methods:
        w = statistics.median(wall[(method, "front")]) / statistics.median(
            wall[(method, "direct")])
        c = cpu[(method, "front")] / cpu[(method, "direct")]
        extra = (cpu[(method, "front")] - cpu[(method, "direct")]) / calls * 1e6
        print(f"{method}: front/direct wall x{w:.3f}, cpu x{c:.3f} ({extra:+.0f} us/call)")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 500,
                     int(sys.argv[2]) if len(sys.argv) > 2 else 6))
