"""The process's own numbers in the names every Prometheus exporter uses
(``process_cpu_seconds_total``, ``process_resident_memory_bytes``, ``process_open_fds``,
``process_max_fds``, ``process_start_time_seconds``), read from ``/proc`` when asked, and
the build's (``butler_build_info``). Off Linux the ``/proc`` ones are left out."""

from __future__ import annotations

import os
import platform
import resource
import time
from pathlib import Path

PROC = Path("/proc/self")


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def resident_bytes() -> float | None:
    try:
        pages = int((PROC / "statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return float(pages * os.sysconf("SC_PAGE_SIZE"))


def open_fds() -> float | None:
    try:
        return float(len(os.listdir(PROC / "fd")))
    except OSError:
        return None


def max_fds() -> float:
    return float(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def start_time() -> float:
    """Seconds since the epoch when this process started: its start in clock ticks after
    boot (``/proc/self/stat``) plus the boot time (``/proc/stat``); now, when unreadable."""
    try:
        # The command name (field 2) may hold spaces: count fields after its ")".
        after_name = (PROC / "stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(after_name[19])  # field 22 of the whole line
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, IndexError, ValueError, StopIteration):
        return time.time()
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def build_labels() -> tuple[str, str]:
    """(Butler's version, Python's) for ``butler_build_info``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("butler-a2a")
    except PackageNotFoundError:  # run from a checkout that was never installed
        ours = "unknown"
    return ours, platform.python_version()
