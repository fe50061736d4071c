#!/usr/bin/env python3
"""File sizes under steady load with retention on:
``.venv/bin/python bench/storage_soak.py [--seconds 600] [--connections 64]``.

Starts ``butler serve`` (echo skill) on a fresh data folder in ``--work`` with short
retention, ``tasks.retention_hours`` of ``--task-retention`` seconds and
``audit.retention_days`` of ``--audit-retention`` seconds with ``audit.segment_records``
``--segment``, so purges and segment drops happen many times within the run. Then
``--connections`` clients on loopback post blocking one-word echo tasks back to back for
``--seconds`` (bounded by time; it stops by itself). Every ``--every`` seconds it prints
the sizes of ``tasks.db`` and ``audit.db`` (each with its WAL), the requests answered,
and the p50/p99 latency of that window. Sizes should level off once retention starts
dropping; the p99 column shows whether a purge or a segment drop stalled the loop.
The documented run is 600 s (bench/HISTORY.md, "Storage at scale").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from internal.http import hash_token  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _size(folder: Path, name: str) -> str:
    """``file + WAL`` in MB: the file is what retention must keep level; the WAL is
    restarted by the checkpointer (tasks) or cut back to its size limit."""
    def mb(path: Path) -> float:
        return path.stat().st_size / 1e6 if path.exists() else 0.0
    return f"{mb(folder / name):.1f} + {mb(folder / (name + '-wal')):.1f}"


async def _client(http: aiohttp.ClientSession, url: str, token: str, until: float,
                  latencies: list[float]) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    n = 0
    while time.monotonic() < until:
        n += 1
        began = time.perf_counter()
        async with http.post(url, json={"task": f"hello {n}", "skill": "echo"},
                             headers=headers) as resp:
            await resp.read()
            if resp.status == 200:
                latencies.append((time.perf_counter() - began) * 1000)


def start(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], int, str]:
    """``butler serve`` on a fresh folder; returns it once its port accepts."""
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    port, token = _free_port(), secrets.token_urlsafe(24)
    config = args.work / "soak.yaml"
    config.write_text(json.dumps({
        "agent": {"id": "soak", "name": "Soak", "description": "storage soak"},
        "data_dir": str(args.work / "data"),
        "configurations": {"a2a": {"enabled": True, "port": port, "bind_address": "127.0.0.1",
                                   "token_hashes": [{"sha256": hash_token(token),
                                                     "name": "operator"}]}},
        "logging": {"level": "warning"},
        "rate_limits": {"per_caller_per_second": 0, "per_address_per_second": 0,
                        "max_inflight_tasks_per_caller": 0},
        "tasks": {"retention_hours": args.task_retention / 3600},
        "audit": {"retention_days": args.audit_retention / 86400,
                  "segment_records": args.segment},
        "skills": [{"id": "echo", "builtin": "echo", "expose": True}],
    }))
    with open(args.work / "serve.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "butler", "serve", "-c", str(config)],
                                cwd=ROOT, stderr=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port, token
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.terminate()
    raise SystemExit(f"butler serve did not start: see {args.work / 'serve.log'}")


async def soak(args: argparse.Namespace, port: int, token: str) -> None:
    folder = args.work / "data"
    url = f"http://127.0.0.1:{port}/v2/tasks"
    until = time.monotonic() + args.seconds
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=args.connections)
    async with aiohttp.ClientSession(connector=connector) as http:
        clients = [asyncio.create_task(_client(http, url, token, until, latencies))
                   for _ in range(args.connections)]
        print("| s | tasks.db + WAL, MB | audit.db + WAL, MB | answered | req/s | p50 ms "
              "| p99 ms |")
        print("|---|---|---|---|---|---|---|")
        began, total = time.monotonic(), 0
        while time.monotonic() < until:
            await asyncio.sleep(args.every)
            window, latencies[:] = sorted(latencies), []
            total += len(window)
            p50 = statistics.median(window) if window else 0.0
            p99 = window[int(len(window) * 0.99) - 1] if window else 0.0
            print(f"| {time.monotonic() - began:.0f} | {_size(folder, 'tasks.db')} | "
                  f"{_size(folder, 'audit.db')} | {total} | "
                  f"{len(window) / args.every:.0f} | {p50:.1f} | {p99:.1f} |", flush=True)
        await asyncio.gather(*clients)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--every", type=float, default=10)
    parser.add_argument("--task-retention", type=float, default=30)
    parser.add_argument("--audit-retention", type=float, default=30)
    parser.add_argument("--segment", type=int, default=20_000)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "soak")
    args = parser.parse_args()
    proc, port, token = start(args)
    try:
        asyncio.run(soak(args, port, token))
    finally:
        proc.terminate()
        proc.wait(60)
    archive = args.work / "data" / "audit-archive"
    print(f"exported segments: {len(list(archive.glob('*.jsonl')))} in {archive}")


if __name__ == "__main__":
    main()
