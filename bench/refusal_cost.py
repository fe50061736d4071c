"""Instructions (or CPU) per refused request: one Butler and a minimal client in one process.

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        .venv/bin/python bench/refusal_cost.py --refusals N

Run it twice, with ``--refusals 0`` and ``--refusals N`` (``bench/refusal_cost.sh`` does
both): the difference in callgrind's "Collected" count over N is what one refusal costs,
the daemon and the client's few instructions together. The refusal is issue 36's flood's:
one caller already holds its whole share of the in-flight pool (``server.max_inflight``
4, its share 3, with blocking requests of a slow skill), and its further ``POST /v2/tasks``
are answered ``429 rate_limited`` on kept-alive connections. Without valgrind it prints
the process's CPU per refusal, which moves with the core's speed and other processes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import butlers

SLOW = {"id": "slow", "command": ["sleep", "600"], "expose": True, "timeout_seconds": 900}
MAX_INFLIGHT = 4
HELD = MAX_INFLIGHT * 3 // 4  # the caller's share of the pool (internal.shares)


def _request(token: str, skill: str) -> bytes:
    body = ('{"task":"x","skill":"' + skill + '","mode":"blocking"}').encode()
    return (f"POST /v2/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}"
            f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


async def _answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    headers = await reader.readuntil(b"\r\n\r\n")
    length = int(headers.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    return headers, await reader.readexactly(length)


async def _hold(port: int, token: str) -> asyncio.StreamWriter:
    """One blocking request of the slow skill, left in flight."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request(token, "slow"))
    return writer


async def _refused(port: int, token: str, count: int, *, until_refused: bool = False) -> None:
    """``count`` requests answered 429 on one kept-alive connection; ``until_refused``:
    first send until one is (the held requests may not have entered yet)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = _request(token, "echo")
    try:
        while until_refused:
            writer.write(request)
            headers, _ = await _answer(reader)
            until_refused = not headers.startswith(b"HTTP/1.1 429")
        for _ in range(count):
            writer.write(request)
            headers, answer = await _answer(reader)
            if not headers.startswith(b"HTTP/1.1 429") or b"rate_limited" not in answer:
                raise RuntimeError(f"not refused: {headers!r} {answer[:300]!r}")
    finally:
        writer.close()


async def _load(port: int, token: str, refusals: int, connections: int) -> None:
    await asyncio.gather(*(_refused(port, token, refusals // connections
                                    + (c < refusals % connections))
                           for c in range(connections)))


async def _main(args: argparse.Namespace, work: Path) -> None:
    from butler.config import load_config
    from butler.daemon import Daemon
    from butler.delegation.wiring import make_delegator
    from internal.http import new_token

    token = new_token()
    cfg: dict[str, Any] = butlers._config("bench", work, 0, {"operator": token},
                                          [butlers.ECHO_SKILL, SLOW], [])
    # Answered at once: what a refusal costs, not how long the hold keeps it waiting.
    cfg["server"] = {"max_inflight": MAX_INFLIGHT, "shutdown_grace_seconds": 1,
                     "refusal_hold_seconds": 0}
    path = work / "bench.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    daemon = Daemon(load_config(path), delegator_factory=make_delegator)
    await daemon.start()
    held = []
    try:
        port = daemon.port
        held = [await _hold(port, token) for _ in range(HELD)]
        await _refused(port, token, 0, until_refused=True)
        await _load(port, token, args.warmup, args.connections)
        start = time.process_time()
        await _load(port, token, args.refusals, args.connections)
        took = time.process_time() - start
        if args.refusals and not os.environ.get("VALGRIND_LIB"):
            print(f"{took / args.refusals * 1e6:.0f} µs of CPU per refusal "
                  "(this process: the daemon and the client)")
    finally:
        for writer in held:
            writer.close()
        await daemon.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--refusals", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--connections", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="refusal-cost-") as tmp:
        asyncio.run(_main(args, Path(tmp)))


if __name__ == "__main__":
    main()
