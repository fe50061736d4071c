"""Fairness under floods (issue 36): one caller, or clients without a token, floods one
shared pool of a Butler with the default limits, while a second caller measures its own
requests. Target: the second caller sees 0 errors and a p99 within 2x its unloaded p99;
after the flood, RSS within 10 % and descriptors within 5 of the baseline.

Floods: ``blocking``, 400 concurrent blocking requests of a slow skill from one token
(the in-flight pool and the running tasks); ``idle``, 600 connections from one address
that never send a request (slowloris: the connection cap); ``grpc``, the blocking flood as
400 ``SendMessage`` calls on the gRPC port (16 connections: 32 calls each at most).

The server has a CPU of its own; the flooding client shares the other with the second
caller, at the lowest priority (``SCHED_IDLE``): it takes all the CPU the second caller
leaves (the flood's rate is printed), but never delays the second caller's own client,
which on a real network would be another machine than the attacker's.

RSS after a flood is read once the descriptors are back and then the daemon's documented
delay for giving a burst's memory back has passed (``butler.runtime.heap``: its quiet
time, one sample interval, and a second of margin for the trim itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from butler.runtime.heap import QUIET_SECONDS, SAMPLE_SECONDS
from harness.butlers import ECHO_SKILL, _config, _serve
from harness.procs import Server
from internal.http import new_token

SLOW = {"id": "slow", "command": ["sleep", "20"], "expose": True, "timeout_seconds": 60}
PROBES = 1000  # the second caller's requests per measurement (its p99: the 10th slowest)
BLOCKING, IDLE = 400, 600


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def _probe(url: str, token: str, source: str) -> tuple[dict[int, int], float]:
    """The second caller, from ``source``: ``PROBES`` echo tasks one after another;
    (errors by status, p99 ms)."""
    errors: dict[int, int] = {}
    took = []
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"},
                                     connector=aiohttp.TCPConnector(local_addr=(source, 0)),
                                     ) as http:
        for n in range(PROBES):
            began = time.perf_counter()
            async with http.post(f"{url}/v2/tasks", json={"task": f"hi {n}", "skill": "echo"},
                                 ) as resp:
                await resp.read()
                if resp.status != 200:
                    errors[resp.status] = errors.get(resp.status, 0) + 1
            took.append((time.perf_counter() - began) * 1000)
    took.sort()
    return errors, took[int(len(took) * 0.99) - 1]


async def _blocking(url: str, token: str, sent: Any) -> None:
    async with aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {token}"},
            # Another address than the second caller's: the per-address rate is not
            # what is measured.
            connector=aiohttp.TCPConnector(limit=0, local_addr=("127.0.0.2", 0)),
            timeout=aiohttp.ClientTimeout(total=120)) as http:
        async def one() -> None:
            while True:
                async with http.post(f"{url}/v2/tasks", json={"task": "x", "skill": "slow"}) as r:
                    await r.read()
                    sent.value += 1
                    if r.status != 200:
                        await asyncio.sleep(0.2)  # refused: its share is full; try again
        await asyncio.gather(*(one() for _ in range(BLOCKING)))


async def _idle(url: str, sent: Any) -> None:
    host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
    async def keep_one() -> None:
        while True:  # reconnect whenever the header deadline (or the cap) cuts it off
            try:
                reader, writer = await asyncio.open_connection(host, int(port),
                                                               local_addr=("127.0.0.2", 0))
            except OSError:
                await asyncio.sleep(0.2)
                continue
            writer.write(b"GET /healthz HTTP/1.1\r\n")  # and never the rest
            sent.value += 1
            with contextlib.suppress(OSError):  # cut off: a 503, a reset
                await reader.read()
            writer.close()
            await asyncio.sleep(0.2)

    await asyncio.gather(*(keep_one() for _ in range(IDLE)))


async def _grpc_blocking(target: str, token: str, sent: Any) -> None:
    import grpc
    from a2a.types import Message, Part, Role, SendMessageRequest, a2a_pb2_grpc

    metadata = (("a2a-version", "1.0"), ("authorization", f"Bearer {token}"))
    # Channels of their own (one target's channels otherwise share one connection).
    channels = [grpc.aio.insecure_channel(target,
                                          options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(16)]

    async def one(n: int) -> None:
        stub = a2a_pb2_grpc.A2AServiceStub(channels[n % len(channels)])  # type: ignore[no-untyped-call]
        while True:
            message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER,
                              parts=[Part(text="x")])
            message.metadata.update({"skill": "slow"})
            try:
                await stub.SendMessage(SendMessageRequest(message=message),
                                       metadata=metadata, timeout=120)
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.2)  # refused: its share is full; try again
            sent.value += 1

    await asyncio.gather(*(one(n) for n in range(BLOCKING)))


def _flood(name: str, url: str, token: str, sent: Any) -> None:
    """In a process of its own, until terminated: the probe's timings are not the
    flooding client's event loop. ``sent``: requests (blocking, grpc) or connections
    (idle). ``url``: the gRPC target for ``grpc``."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    if name == "blocking":
        asyncio.run(_blocking(url, token, sent))
    elif name == "idle":
        asyncio.run(_idle(url, sent))
    else:
        asyncio.run(_grpc_blocking(url, token, sent))


async def _settled(pid: int, fds: int, seconds: float) -> None:
    """Until ``pid`` has at most ``fds`` descriptors open, for up to ``seconds`` (the
    server is another process: there is nothing to wait on but its /proc entry)."""
    for _ in range(int(seconds * 2)):
        if _fds(pid) <= fds:
            return
        await asyncio.sleep(0.5)


async def _one(name: str, server: Server, tokens: dict[str, str],
               target: str) -> dict[str, Any]:
    """``target``: where the flood goes (the gRPC port's for ``grpc``)."""
    pid = server.pid
    # The HTTP floods come from 127.0.0.2; gRPC's channels cannot choose their source
    # address, so that flood comes from 127.0.0.1. The second caller is elsewhere: the
    # per-address rate is not what is measured.
    probe = "127.0.0.3"
    _, quiet_p99 = await _probe(server.url, tokens["other"], probe)  # and a warm baseline
    rss, fds = server.rss_mb(), _fds(pid)
    spawn = multiprocessing.get_context("spawn")
    sent = spawn.Value("q", 0, lock=False)  # one writer: the flood's single thread
    flood = spawn.Process(target=_flood, args=(name, target, tokens["flood"], sent),
                          daemon=True)
    flood.start()
    await asyncio.sleep(3)  # the flood fills its pool
    began, before = time.perf_counter(), sent.value
    errors, loaded_p99 = await _probe(server.url, tokens["other"], probe)
    flood_rate = (sent.value - before) / (time.perf_counter() - began)
    flood.kill()
    flood.join()
    await _settled(pid, fds + 5, 30)  # tasks end, connections time out
    await asyncio.sleep(QUIET_SECONDS + SAMPLE_SECONDS + 1)  # its memory given back
    after_rss, after_fds = server.rss_mb(), _fds(pid)
    return {"flood": name, "errors": sum(errors.values()), "error_statuses": errors,
            "quiet_p99_ms": round(quiet_p99, 2),
            "loaded_p99_ms": round(loaded_p99, 2),
            "p99_ratio": round(loaded_p99 / quiet_p99, 2) if quiet_p99 else None,
            "flood_per_second": round(flood_rate),
            "rss_mb": [round(rss, 1), round(after_rss, 1)], "fds": [fds, after_fds],
            "ok": not errors and loaded_p99 <= 2 * quiet_p99
            and after_rss <= rss * 1.1 and after_fds <= fds + 5}


def run(work: Path, cpu: str | None) -> list[dict[str, Any]]:
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in ("blocking", "idle", "grpc"):
        tokens = {"flood": new_token(), "other": new_token()}
        cfg = _config(f"fair-{name}", work, 0, tokens, [ECHO_SKILL, SLOW], [])
        cfg["rate_limits"] = {}  # the defaults: they are part of what is measured
        if name == "grpc":
            cfg["configurations"]["a2a"]["grpc_port"] = 0
        server = _serve(f"fair-{name}", cfg, work, cpu)
        try:
            target = _grpc_target(server.url) if name == "grpc" else server.url
            rows.append(asyncio.run(_one(name, server, tokens, target)))
        finally:
            server.stop()
    return rows


def _grpc_target(url: str) -> str:
    """The gRPC port's ``host:port``, from the daemon's card."""
    with urllib.request.urlopen(f"{url}/.well-known/agent-card.json", timeout=10) as resp:
        card = json.load(resp)
    (grpc,) = [i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"]
    return str(grpc)


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'flood':10} {'per s':>6} {'errors':>6} {'p99 quiet':>10} {'p99 flood':>10} "
            f"{'ratio':>6} "
            f"{'RSS MB before/after':>20} {'fds before/after':>17}  target")
    lines = [head]
    for r in rows:
        lines.append(f"{r['flood']:10} {r.get('flood_per_second', '-')!s:>6} "
                     f"{r['errors']:>6} {r['quiet_p99_ms']:>10} "
                     f"{r['loaded_p99_ms']:>10} {r['p99_ratio']!s:>6} "
                     f"{'/'.join(map(str, r['rss_mb'])):>20} "
                     f"{'/'.join(map(str, r['fds'])):>17}  {'met' if r['ok'] else 'MISSED'}")
    return "\n".join(lines)
