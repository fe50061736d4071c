"""What the gRPC port's front costs per call: N unary calls one at a time (GetTask of a
finished task, and SendMessage to the echo skill), straight to gRPC's own loopback port
and through the front (internal/http/_tcp_front.py), in alternating rounds on one
daemon, client and daemon in this process.

    PYTHONPATH=. .venv/bin/python bench/grpc_front.py [N] [ROUNDS]

Prints, per method and carrier, the median wall time per call and the process's CPU per
call (``time.process_time``: gRPC's threads included), then the ratios front/direct.
The direct server is a second gRPC server with the same binding and no front (its
calls are not resolved through the front's map, which is a dict lookup)."""

from __future__ import annotations

import asyncio
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
from internal.protocol.a2a.server.grpc_binding import GrpcBinding
from tests.a2a_support import send_request, text, user_message
from tests.grpc_support import channel, service_stub
from tests.support import Swarm

V1 = [("a2a-version", "1.0")]
WARM_UP = 50
UNLIMITED = {"rate_limits": {"per_address_per_second": 0, "per_caller_per_second": 0}}


async def direct_server(front: Any) -> tuple[grpc.aio.Server, int]:
    binding = GrpcBinding(front.v1, front.verifier, front.load_limits, streams=front.streams,
                          per_caller=front.per_caller)
    server = grpc.aio.server(handlers=[binding.handler()])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def timed(stub: Any, method: str, request: Any, n: int) -> tuple[list[float], float]:
    call = getattr(stub, method)
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
            direct, direct_port = await direct_server(home.daemon.app[A2A_FRONT])
            token = home.tokens["operator"]
            targets = {"direct": f"127.0.0.1:{direct_port}",
                       "front": f"127.0.0.1:{home.daemon.grpc_port}"}
            chans = {name: channel(target, token) for name, target in targets.items()}
            stubs = {name: service_stub(chan) for name, chan in chans.items()}
            sent = await stubs["front"].SendMessage(
                send_request(user_message(text("hello"))), metadata=V1)
            methods = {"GetTask": GetTaskRequest(id=sent.task.id),
                       "SendMessage": send_request(user_message(text("hello")))}
            wall: dict[tuple[str, str], list[float]] = {}
            cpu: dict[tuple[str, str], float] = {}
            for r in range(rounds):
                order = ["direct", "front"] if r % 2 == 0 else ["front", "direct"]
                for method, request in methods.items():
                    for name in order:
                        times, used = await timed(stubs[name], method, request, n)
                        wall.setdefault((method, name), []).extend(times)
                        cpu[(method, name)] = cpu.get((method, name), 0.0) + used
            for chan in chans.values():
                await chan.close()
            await direct.stop(None)
        finally:
            await swarm.close()
    calls = n * rounds
    print(f"{calls} calls per method and carrier, one at a time, {rounds} alternating rounds")
    print(f"{'method':<12} {'carrier':<7} {'median ms':>10} {'cpu ms/call':>12}")
    for (method, name), times in wall.items():
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
