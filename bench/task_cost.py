"""Instructions (or CPU) per task: one Butler and a minimal client in one process.

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        .venv/bin/python bench/task_cost.py --tasks N --kind v2|jsonrpc|rest

Run it twice, with ``--tasks 0`` and ``--tasks N``: the difference in callgrind's
"Collected" count over N is the instructions one task costs, the daemon's threads (event
loop, audit writer, checkpointer) and the client's few together. Instruction counts do not
move with the core's speed or with other processes on a shared host, so two builds compare
in one pair of runs (``bench/task_cost.sh`` does both). Without valgrind it prints the
process's CPU per task, which does move with them.

The client is raw HTTP/1.1 over asyncio streams on ``--connections`` keep-alive
connections (64 by default, as the bench's main load point), each sending its next request
when its answer has arrived, like wrk, so tasks share group commits as under load.
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
from harness.inbound import JSONRPC_BODY, REST_BODY

PATHS = {"v2": "/v2/tasks", "jsonrpc": "/a2a/jsonrpc", "rest": "/message:send"}
MARKERS = {"v2": b'"completed"', "jsonrpc": b"TASK_STATE_COMPLETED",
           "rest": b"TASK_STATE_COMPLETED"}


def _body(kind: str, n: str) -> bytes:
    template = {"v2": butlers.v2_body(), "jsonrpc": JSONRPC_BODY, "rest": REST_BODY}[kind]
    return template.replace("{n}", n).encode()


async def _connection(port: int, token: str, kind: str, ids: list[str]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (f"POST {PATHS[kind]} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}"
            "\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n")
    try:
        for n in ids:
            body = _body(kind, n)
            writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            headers = await reader.readuntil(b"\r\n\r\n")
            length = int(headers.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            answer = await reader.readexactly(length)
            if not headers.startswith(b"HTTP/1.1 200") or MARKERS[kind] not in answer:
                raise RuntimeError(f"bad answer: {headers!r} {answer[:300]!r}")
    finally:
        writer.close()


async def _load(port: int, token: str, kind: str, tasks: int, connections: int,
                prefix: str) -> None:
    ids = [f"{prefix}-{i}" for i in range(tasks)]
    await asyncio.gather(*(_connection(port, token, kind, ids[c::connections])
                           for c in range(min(connections, tasks))))


async def _main(args: argparse.Namespace, work: Path) -> None:
    from butler.config import load_config
    from butler.daemon import Daemon
    from butler.delegation.wiring import make_delegator
    from internal.http import new_token

    token = new_token()
    cfg: dict[str, Any] = butlers._config("bench", work, 0, {"operator": token},
                                          [butlers.ECHO_SKILL], [])
    path = work / "bench.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    daemon = Daemon(load_config(path), delegator_factory=make_delegator)
    await daemon.start()
    try:
        port = daemon.port
        await _load(port, token, args.kind, args.warmup, args.connections, "warm")
        start = time.process_time()
        await _load(port, token, args.kind, args.tasks, args.connections, "task")
        took = time.process_time() - start
        if args.tasks and not os.environ.get("VALGRIND_LIB"):
            print(f"{args.kind}: {took / args.tasks * 1e6:.0f} µs of CPU per task "
                  "(this process: the daemon and the client)")
    finally:
        await daemon.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=sorted(PATHS), default="v2")
    ap.add_argument("--tasks", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--connections", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="task-cost-") as tmp:
        asyncio.run(_main(args, Path(tmp)))


if __name__ == "__main__":
    main()
