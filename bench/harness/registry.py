"""Scenario 4: registry capability and free-text query latency at growing scale (up to
1,000,000 agents) on SQLite and Redis, and registrations per second (through the store
API and over HTTP).

``butler registry serve`` runs as a subprocess on the server CPU (with redis-server, for
the Redis store, on the same CPU); agents are written through the store API from this
process; queries go over HTTP with wrk on the load CPU, and straight to the store."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from butler.registry.store import RegistryStore
from butler.registry.store_url import open_store
from harness import registry_data, wrk
from harness.procs import Cpus, Server, free_port, pinned, start
from internal.http import hash_token, new_token

WRITERS = 64  # identities used for HTTP registrations, in turn
QUERY_LIMIT = 20


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _start_redis(work: Path, cpu: str | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = (work / "redis.log").open("wb")
    proc = subprocess.Popen(pinned(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                    "--save", "", "--appendonly", "no"], cpu),
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 20
    while not _pong(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"redis-server did not start; see {work / 'redis.log'}")
        time.sleep(0.1)
    return proc, url


def _serve(work: Path, store_url: str, cpu: str | None, reader: str,
           writers: list[str]) -> Server:
    cfg = {"registry": {
        "port": 0, "data_dir": str(work / "registry-data"), "store": store_url,
        # Bare hashes: each token is its own identity (token:<first 8 hex>).
        "token_hashes": [hash_token(t) for t in (reader, *writers)],
        "max_names_per_identity": 1_000_000, "max_writes_per_minute": 1_000_000,
        "max_inflight": 1024,
    }}
    path = work / "registry.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return start("registry", [sys.executable, "-m", "butler", "registry", "serve", "-c",
                              str(path)], work / "registry.log", cpu)


def _query_load(reader: str) -> wrk.Load:
    return wrk.Load(path=f"/v1/agents?capability=cap.{{k}}&limit={QUERY_LIMIT}", method="GET",
                    tokens=(reader,), expect='"agents":[{', mod=registry_data.CAPABILITIES)


# Free-text queries (wrk, 1 connection): a rare word; a common word with a rare one; a
# word every agent has (so the SQLite store walks names in order); a word none has.
FREE_TEXT = (
    ("rare word", "topic{k}", '"agents":[{'),
    ("common + rare", "synthetic%20topic{k}", '"agents":[{'),
    ("common word", "synthetic", '"agents":[{'),
    ("absent word", "absent{k}", '"agents":[]'),
)


def _free_text_load(reader: str, q: str, expect: str) -> wrk.Load:
    return wrk.Load(path=f"/v1/agents?q={q}&limit={QUERY_LIMIT}", method="GET",
                    tokens=(reader,), expect=expect, mod=registry_data.TOPICS)


async def _measure_store(kind: str, store_url: str, work: Path, cpus: Cpus, scales: list[int],
                         seconds: float, warmup: float,
                         extra_pids: tuple[int, ...] = ()) -> dict[str, Any]:
    reader = new_token()
    writers = [new_token() for _ in range(WRITERS)]
    server = _serve(work, store_url, cpus.server, reader, writers)
    store: RegistryStore = await open_store(store_url)
    pids = (server.pid, *extra_pids)
    rows: list[dict[str, Any]] = []
    out: dict[str, Any] = {"store": kind, "scales": rows}
    try:
        have = 0
        load = _query_load(reader)
        for scale in scales:
            rate = await registry_data.populate(store, have, scale)
            have = scale
            print(f"[bench]   {kind}: {scale} agents (store upserts {rate:.0f}/s)",
                  file=sys.stderr)
            http = wrk.measure(server.url, load, connections=1, seconds=seconds,
                               warmup=warmup, cpu=cpus.load, pids=pids)
            busy = wrk.run(server.url, load, connections=16, seconds=seconds, cpu=cpus.load,
                           pids=pids)
            raw = await registry_data.raw_query_latency(store, min(seconds, 3.0), QUERY_LIMIT)
            text = {label: wrk.measure(server.url, _free_text_load(reader, q, expect),
                                       connections=1, seconds=seconds, warmup=warmup,
                                       cpu=cpus.load, pids=pids).to_json()
                    for label, q, expect in FREE_TEXT}
            rows.append({"agents": scale, "store_upserts_per_s": round(rate, 1),
                         "http_c1": http.to_json(), "http_c16": busy.to_json(),
                         "store_query": raw, "free_text_c1": text})
            print(f"[bench]   {kind} {scale:>7}: HTTP p50 {http.p50_ms:.2f} ms "
                  f"p99 {http.p99_ms:.2f} ms; 16 conns {busy.rps:.0f} req/s; "
                  f"store p50 {raw['p50_ms']:.2f} ms p99 {raw['p99_ms']:.2f} ms; free text p99 "
                  + ", ".join(f"{label} {r['p99_ms']:.2f} ms" for label, r in text.items()),
                  file=sys.stderr)
        reg = wrk.Load(path="/v1/agents/reg-{n}", method="PUT",
                       body=registry_data.registration_body(), tokens=tuple(writers),
                       expect='"name":"reg-', mod=registry_data.CAPABILITIES)
        regs = wrk.run(server.url, reg, connections=16, seconds=seconds, cpu=cpus.load,
                       pids=pids)
        out["http_registrations"] = {"agents_before": have, **regs.to_json()}
        print(f"[bench]   {kind}: HTTP registrations {regs.rps:.0f}/s "
              f"(p99 {regs.p99_ms:.1f} ms)", file=sys.stderr)
        out["registry_rss_mb"] = round(server.rss_mb(), 1)
    finally:
        await store.close()
        server.stop()
    return out


def run(work: Path, cpus: Cpus, scales: list[int], seconds: float,
        warmup: float) -> dict[str, Any]:
    results: dict[str, Any] = {}
    sqlite_dir = work / "sqlite"
    sqlite_dir.mkdir(parents=True, exist_ok=True)
    results["sqlite"] = asyncio.run(_measure_store(
        "sqlite", f"sqlite:{sqlite_dir / 'registry.db'}", sqlite_dir, cpus, scales, seconds,
        warmup))
    if shutil.which("redis-server") is None:
        results["redis"] = "skipped: redis-server is not installed"
        return results
    redis_dir = work / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    proc, url = _start_redis(redis_dir, cpus.server)
    try:
        results["redis"] = asyncio.run(_measure_store("redis", url, redis_dir, cpus, scales,
                                                      seconds, warmup, (proc.pid,)))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return results
