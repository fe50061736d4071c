"""CPU per task of one Butler under wrk, per thread, for A/B runs of two source trees.

    bench/.venv/bin/python bench/cpu_per_task.py --src /path/a --src /path/b \
        [--rounds 3] [--seconds 4] [--connections 64] [--only v2,jsonrpc,rest]

Each round starts one daemon per source tree in turn (``python -m butler serve`` with that
tree first on ``PYTHONPATH``; the server pinned to the first CPU, wrk to the others), warms
it up, then loads each endpoint and reads the daemon's CPU time from ``/proc`` before and
after: the µs of CPU per completed request, on the event loop (the main thread) and on all
other threads (audit writer, checkpointer, storage workers). CPU per request is steadier
than req/s on a shared host whose core changes speed: both move with the core, but this one
does not move with other processes' load.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml

from harness import butlers, wrk
from harness.inbound import A2A_HEADERS, JSONRPC_BODY, REST_BODY
from harness.procs import Cpus, free_port, wait_http
from internal.http import new_token

_TICK = os.sysconf("SC_CLK_TCK")


def _threads(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of ``pid``, by thread id."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / _TICK
    return out


def _thread_names(pid: int) -> dict[int, str]:
    """Python's names of the threads of ``pid`` (``py-spy dump``), by thread id."""
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        return {}
    done = subprocess.run([str(spy), "dump", "-p", str(pid)], capture_output=True,
                          text=True, check=False)
    names = {}
    for line in done.stdout.splitlines():
        match = re.match(r"Thread (\d+) \((?:active|idle)[^)]*\): \"([^\"]*)\"", line)
        if match:
            names[int(match.group(1))] = match.group(2)
    return names


def _serve(src: Path, work: Path, cpu: str | None) -> tuple[subprocess.Popen[bytes], str, str]:
    token = new_token()
    port = free_port()
    cfg = butlers._config("bench", work, port, {"operator": token}, [butlers.ECHO_SKILL], [])
    path = work / "bench.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    argv = [sys.executable, "-m", "butler", "serve", "-c", str(path)]
    if cpu is not None:
        argv = ["taskset", "-c", cpu, *argv]
    env = {**os.environ, "PYTHONPATH": str(src)}
    with (work / "bench.log").open("wb") as log:
        proc = subprocess.Popen(argv, cwd=src, env=env, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz", timeout=60)
    return proc, url, token


def _loads(token: str) -> dict[str, wrk.Load]:
    return {
        "v2": wrk.Load(path="/v2/tasks", body=butlers.v2_body(), tokens=(token,),
                       expect='"completed"'),
        "jsonrpc": wrk.Load(path="/a2a/jsonrpc", body=JSONRPC_BODY, tokens=(token,),
                            headers=A2A_HEADERS, expect="TASK_STATE_COMPLETED"),
        "rest": wrk.Load(path="/message:send", body=REST_BODY, tokens=(token,),
                         headers=A2A_HEADERS, expect="TASK_STATE_COMPLETED"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", action="append", required=True, type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--only", default="v2,jsonrpc,rest")
    ap.add_argument("--threads", action="store_true",
                    help="each thread's CPU per request, by its Python name")
    ap.add_argument("--profile", type=Path, help="py-spy each measured run into this folder")
    args = ap.parse_args()
    cpus = Cpus.detect()
    names = args.only.split(",")
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for rnd in range(args.rounds):
        for src in args.src:
            with tempfile.TemporaryDirectory(prefix="cpt-") as tmp:
                proc, url, token = _serve(src.resolve(), Path(tmp), cpus.server)
                try:
                    loads = _loads(token)
                    for name in names:
                        wrk.run(url, loads[name], connections=args.connections, seconds=2,
                                cpu=cpus.load)  # warm-up
                    for name in names:
                        spy = None
                        if args.profile is not None:
                            args.profile.mkdir(parents=True, exist_ok=True)
                            out = args.profile / f"{src.name}-{name}-{rnd}.txt"
                            spy = subprocess.Popen(
                                [str(Path(sys.executable).parent / "py-spy"), "record",
                                 "-r", "250", "-d", str(int(args.seconds)), "--threads",
                                 "-f", "raw", "-o", str(out), "-p", str(proc.pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        before = _threads(proc.pid)
                        res = wrk.run(url, loads[name], connections=args.connections,
                                      seconds=args.seconds, cpu=cpus.load)
                        after = _threads(proc.pid)
                        if spy is not None:
                            spy.wait()
                        n = max(1, res.requests - res.bad)
                        used = {tid: (after[tid] - before.get(tid, 0.0)) / n * 1e6
                                for tid in after}
                        loop = used.pop(proc.pid, 0.0)
                        other = sum(used.values())
                        results.setdefault((str(src), name), []).append(
                            (loop, other, res.rps))
                        print(f"round {rnd} {src.name:>10} {name:>8}: loop {loop:6.0f} "
                              f"other {other:5.0f} total {loop + other:6.0f} µs/req  "
                              f"{res.rps:7.0f} req/s p99 {res.p99_ms:6.1f} ms bad {res.bad}",
                              flush=True)
                        if args.threads:
                            named = _thread_names(proc.pid)
                            print("    " + ", ".join(
                                f"{named.get(tid, tid)} {us:.0f}" for tid, us in
                                sorted(used.items(), key=lambda kv: -kv[1]) if us >= 0.5))
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
    print("\nmedians (range) µs of CPU per request")
    for (src, name), rows in results.items():
        tot = [a + b for a, b, _ in rows]
        print(f"{Path(src).name:>10} {name:>8}: loop {statistics.median(r[0] for r in rows):5.0f}"
              f" other {statistics.median(r[1] for r in rows):5.0f} total "
              f"{statistics.median(tot):5.0f} ({min(tot):.0f}-{max(tot):.0f}; loop min "
              f"{min(r[0] for r in rows):.0f}) "
              f"req/s {statistics.median(r[2] for r in rows):5.0f}")


if __name__ == "__main__":
    main()
