"""What ran the bench: reported with every result."""

from __future__ import annotations

import os
import platform
import shutil
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from harness.bootstrap import REPO
from harness.procs import Cpus


def _first_line(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return "not installed"
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout
                                                                    or done.stderr) else "?"


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):  # noqa: SIM115
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib() -> float:
    try:
        for line in open("/proc/meminfo", encoding="utf-8"):  # noqa: SIM115
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git() -> dict[str, Any]:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=False)
        return done.stdout.strip()

    return {"commit": git("rev-parse", "--short", "HEAD") or "unknown",
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def describe(cpus: Cpus) -> dict[str, Any]:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "memory_gib": _mem_gib(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "python_impl": sys.implementation.name,
        "sqlite": sqlite3.sqlite_version,
        "pinning": {"server_cpu": cpus.server, "load_cpu": cpus.load,
                    "tool": "taskset" if cpus.server is not None else "none"},
        "load_generator": _first_line(["wrk", "--version"]).split(" Copyright")[0],
        "redis_server": _first_line(["redis-server", "--version"]),
        "packages": {name: _version(name) for name in
                     ("aiohttp", "a2a-sdk", "starlette", "uvicorn", "SQLAlchemy",
                      "aiosqlite", "redis", "py-spy")},
        "butler": _git(),
    }


def one_line(info: dict[str, Any]) -> str:
    pin = info["pinning"]
    pinning = (f"server on CPU {pin['server_cpu']}, load on CPU {pin['load_cpu']}"
               if pin["server_cpu"] is not None else "not pinned")
    dirty = " (uncommitted changes)" if info["butler"]["dirty"] else ""
    return (f"{info['cores']} cores ({info['cpu_model']}), {info['memory_gib']} GiB, "
            f"Python {info['python']}, SQLite {info['sqlite']}, {pinning}; "
            f"butler {info['butler']['commit']}{dirty}")
