"""The floor under every Butler request: aiohttp alone, and aiohttp with one signature.

    bench/.venv/bin/python bench/floor.py [--rounds 2] [--seconds 6]

A minimal aiohttp app (one POST route that reads the body and answers 90 bytes of fixed
JSON; no middleware, no storage) is served pinned to the servers' CPU and loaded by wrk
from the other, at 64 connections and at one, in two variants: as it is, and signing 600
bytes with Ed25519 per request, as every Butler task's receipt does. For each: req/s,
p50, and the server's CPU per request from ``/proc``. What Butler does beyond these is
its own work; bench/HISTORY.md ("Issue 24: what is left") sets the two side by side
with Butler and @a2a-js/sdk measured in the same hour. ``--serve MODE`` is the server
itself (it prints its URL, as ``harness.procs.start`` expects).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from idle import cpu_seconds

from harness import wrk
from harness.procs import Cpus, free_port, start

_ANSWER = (b'{"id":"t-1","state":"completed",'
           b'"result":{"parts":[{"kind":"text","text":"hello"}]}}')
MODES = ("plain", "sign")


def _serve(mode: str, port: int) -> None:
    from aiohttp import web
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    payload = b"x" * 600

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        if mode == "sign":
            key.sign(payload)
        return web.Response(body=_ANSWER, content_type="application/json")

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/t", handle)
    app.router.add_get("/healthz", healthz)
    url = f"http://127.0.0.1:{port}"
    web.run_app(app, host="127.0.0.1", port=port, access_log=None,
                print=lambda *_: print(f"serving on {url}", flush=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--serve", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        _serve(args.serve, args.port)
        return 0
    cpus = Cpus.detect()
    load = wrk.Load(path="/t", body='{"task":"hello {n}"}', expect='"completed"')
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for mode in MODES:
                server = start(mode, [sys.executable, __file__, "--serve", mode,
                                      "--port", str(free_port())],
                               Path(tmp) / f"{mode}.log", cpus.server)
                try:
                    for connections in (64, 1):
                        wrk.run(server.url, load, connections=connections, seconds=2,
                                cpu=cpus.load)
                        before = cpu_seconds(server.pid)
                        got = wrk.run(server.url, load, connections=connections,
                                      seconds=args.seconds, cpu=cpus.load)
                        used = cpu_seconds(server.pid) - before
                        print(f"{mode:5} c={connections:<3} {got.rps:9.0f} req/s  p50 "
                              f"{got.p50_ms:6.3f} ms  {used / max(got.requests, 1) * 1e6:5.0f}"
                              f" µs CPU a request  bad {got.bad}", flush=True)
                finally:
                    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
