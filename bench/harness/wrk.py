"""The load generator: wrk (C, epoll, keep-alive connections) with bench/lua/load.lua,
run as its own process on the load CPU. One call = one closed-loop run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass

from harness import noise
from harness.bootstrap import BENCH
from harness.procs import pinned

SCRIPT = BENCH / "lua" / "load.lua"


@dataclass(frozen=True)
class Load:
    """What each request looks like; see the placeholders in load.lua."""

    path: str
    body: str = ""
    method: str = "POST"
    tokens: tuple[str, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    expect: str = ""
    mod: int = 1000


@dataclass(frozen=True)
class Result:
    connections: int
    seconds: float
    requests: int
    bad: int
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    mean_ms: float
    noise_cpu_pct: float = 0.0  # CPU other processes took meanwhile; see harness/noise.py

    def to_json(self) -> dict[str, float | int]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def run(base_url: str, load: Load, *, connections: int, seconds: float,
        cpu: str | None, pids: tuple[int, ...] = (), timeout_s: float = 10.0) -> Result:
    """One wrk run; ``pids``: the servers under load, for the noise measurement."""
    env = dict(os.environ)
    env.update({
        "BENCH_METHOD": load.method, "BENCH_PATH": load.path, "BENCH_BODY": load.body,
        "BENCH_TOKENS": ",".join(load.tokens), "BENCH_EXPECT": load.expect,
        "BENCH_HEADERS": "|".join(f"{k}: {v}" for k, v in load.headers),
        "BENCH_MOD": str(load.mod),
    })
    argv = pinned(["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s",
                   f"--timeout={timeout_s:g}s", "-s", str(SCRIPT), base_url], cpu)
    meter = noise.Meter(pids, noise.PATIENCE.cpu)
    done = subprocess.run(argv, env=env, capture_output=True, text=True,
                          timeout=seconds + timeout_s + 30, check=False)
    noise_pct = meter.stop()
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr[-1000:]}"
                           f"{done.stdout[-1000:]}")
    raw = json.loads(line.removeprefix("BENCH_JSON "))
    elapsed = raw["duration_us"] / 1e6
    ok = raw["requests"] - raw["bad"]
    return Result(
        connections=connections, seconds=round(elapsed, 2), requests=raw["requests"],
        bad=raw["bad"] + raw["socket_errors"] + raw["timeouts"],
        rps=ok / elapsed if elapsed else 0.0,
        p50_ms=raw["p50_us"] / 1000, p90_ms=raw["p90_us"] / 1000,
        p99_ms=raw["p99_us"] / 1000, p999_ms=raw["p999_us"] / 1000,
        max_ms=raw["max_us"] / 1000, mean_ms=raw["mean_us"] / 1000, noise_cpu_pct=noise_pct,
    )


def measure(base_url: str, load: Load, *, connections: int, seconds: float,
            warmup: float, cpu: str | None, pids: tuple[int, ...] = ()) -> Result:
    """A warm-up run (discarded), then the measured run; first, if the run may still
    wait (``--wait-quiet``), until other processes leave the machine quiet."""
    noise.PATIENCE.settle()
    if warmup > 0:
        run(base_url, load, connections=connections, seconds=warmup, cpu=cpu)
    result = run(base_url, load, connections=connections, seconds=seconds, cpu=cpu, pids=pids)
    if result.noise_cpu_pct > noise.NOISY_PCT:
        print(f"[bench]   note: other processes took {result.noise_cpu_pct:.0f} % of the "
              "server's CPU during this load point; it is low and noisy", file=sys.stderr)
    return result
