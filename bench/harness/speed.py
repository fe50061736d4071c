"""How fast the servers' CPU ran during a run.

On a shared VM one core can run at two speeds and switch between them every few tens of
milliseconds (another tenant on its sibling thread, or the host's scheduler): on the VM
these numbers come from, a fixed piece of Python took 1.1 ms in some stretches and 2.1 ms
in others, and the share of slow stretches drifted from minute to minute. ``noise %``
does not see this (no other process takes the CPU), yet every latency moves with it. So
the bench times a fixed chunk of pure Python over and over on the servers' CPU, before
each scenario and at the end. Its median is what the measurements around it got: compare
it between runs on one machine before comparing their numbers. (A sample can fall wholly
in a slow stretch, so its fastest time is not a sure reading of the full speed.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from harness.procs import pinned

_PROGRAM = """
import json, sys, time

def chunk():
    x = 0
    for i in range(40_000):
        x += i
    return x

end = time.perf_counter() + float(sys.argv[1])
times = []
while time.perf_counter() < end:
    start = time.perf_counter()
    chunk()
    times.append(time.perf_counter() - start)
print(json.dumps(times))
"""


def summarise(times: list[float]) -> dict[str, float]:
    """The chunk's time in ms: 10th percentile, median, 90th percentile."""
    ordered = sorted(times)
    def at(share: float) -> float:
        return round(ordered[int(share * (len(ordered) - 1))] * 1000, 3)
    return {"chunks": len(ordered), "chunk_p10_ms": at(0.1), "chunk_median_ms": at(0.5),
            "chunk_p90_ms": at(0.9)}


def sample(cpu: str | None, seconds: float = 1.5) -> dict[str, Any]:
    """Time the chunk for ``seconds`` on ``cpu`` (the servers' CPU, idle at that moment)."""
    done = subprocess.run(pinned([sys.executable, "-c", _PROGRAM, str(seconds)], cpu),
                          capture_output=True, text=True, timeout=seconds + 30, check=True)
    return summarise(json.loads(done.stdout))


def one_line(point: dict[str, Any]) -> str:
    return (f"server CPU speed: a fixed Python chunk took {point['chunk_median_ms']:.2f} ms "
            f"(median; p10 {point['chunk_p10_ms']:.2f}, p90 {point['chunk_p90_ms']:.2f})")
