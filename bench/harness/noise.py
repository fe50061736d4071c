"""How much CPU other processes took while a load point ran.

The machine may be shared (a test suite, a build). During each load point the bench
compares the CPU time the server's CPU spent busy (/proc/stat, hypervisor steal
included) with the CPU time of the servers under test, which are pinned there. What is
left was taken by someone else; in percent of that CPU over the run it is the load
point's ``noise_cpu_pct``. Above ~10 % the numbers are low and noisy. Without pinning the
whole machine is compared with the servers, wrk and the bench itself.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK")
NOISY_PCT = 10.0


def _busy(cpu: str | None) -> float:
    """Seconds of CPU spent busy since boot: by CPU ``cpu``, or by all CPUs."""
    label = "cpu" if cpu is None else f"cpu{cpu}"
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name == label:
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, values[:8])
            return (user + nice + system + irq + softirq + steal) / _TICK
    raise RuntimeError(f"no {label} line in /proc/stat")


def _process_cpu(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(stat[11]) + int(stat[12])) / _TICK  # utime + stime, every thread


def _own_cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # wrk, once it has exited
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@dataclass
class Meter:
    """Start before a load point, ``stop()`` after wrk exited. ``pids``: the servers, all
    pinned to ``cpu`` (None: not pinned)."""

    pids: tuple[int, ...]
    cpu: str | None
    _t0: float = field(default=0.0, init=False)
    _busy0: float = field(default=0.0, init=False)
    _ours0: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._t0 = time.monotonic()
        self._busy0 = _busy(self.cpu)
        self._ours0 = self._ours()

    def _ours(self) -> float:
        servers = sum(_process_cpu(p) for p in self.pids)
        return servers if self.cpu is not None else servers + _own_cpu()

    def stop(self) -> float:
        wall = time.monotonic() - self._t0
        foreign = (_busy(self.cpu) - self._busy0) - (self._ours() - self._ours0)
        cpus = 1 if self.cpu is not None else os.cpu_count() or 1
        return round(max(0.0, 100 * foreign / (wall * cpus)), 1) if wall > 0 else 0.0


def busy_now(seconds: float = 1.0, cpu: str | None = None) -> float:
    """Percent of CPU ``cpu`` (None: of all CPUs, this process excluded) busy over
    ``seconds``."""
    meter = Meter((), cpu)
    time.sleep(seconds)
    return meter.stop()


def points(tree: Any) -> list[float]:
    """Every ``noise_cpu_pct`` in a results tree."""
    if isinstance(tree, dict):
        own = [float(tree["noise_cpu_pct"])] if "noise_cpu_pct" in tree else []
        return own + [v for value in tree.values() for v in points(value)]
    if isinstance(tree, list):
        return [v for item in tree for v in points(item)]
    return []


@dataclass
class Patience:
    """How long the whole run may still wait for a quiet machine (``--wait-quiet``)."""

    seconds: float = 0.0
    cpu: str | None = None  # the servers' CPU

    def settle(self) -> None:
        """Wait (within what is left of the budget) until the others use < NOISY_PCT."""
        while self.seconds > 0:
            began = time.monotonic()
            quiet = busy_now(1.0, self.cpu) < NOISY_PCT
            self.seconds -= time.monotonic() - began
            if quiet:
                return


PATIENCE = Patience()  # set once by run.py (--wait-quiet, the server CPU); read by wrk.py
