"""What an idle daemon costs: CPU over a quiet minute and resident memory.

    .venv/bin/python bench/idle.py [--seconds 60] [--settle 5]

Starts ``butler serve`` on loopback (an echo skill, no registry, as bench/cli_startup.py
does), sends it one task so the lazy paths are warm, lets it settle, then reads its CPU
time (user + system, ``/proc/<pid>/stat``) before and after ``--seconds`` of nothing, and
its ``VmRSS``. CPU time is what the process used, not wall time: other work on the
machine barely moves it. Linux only. The numbers are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_startup import BIN, REPO, start_daemon

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    # Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
    after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(after_name[11]) + int(after_name[12])) / TICKS


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=5.0)
    args = parser.parse_args()
    token = secrets.token_hex(32)
    env = {**os.environ, "BUTLER_TOKEN": token}
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_daemon(Path(tmp), token)
        try:
            subprocess.run([str(BIN / "butler"), "send", url, "warm", "--skill", "echo"],
                           env=env, check=True, capture_output=True, cwd=REPO)
            time.sleep(args.settle)
            before, began = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(args.seconds)
            used, spent = cpu_seconds(proc.pid) - before, time.monotonic() - began
            rss = rss_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"idle over {spent:.0f} s: CPU {used:.2f} s = {100 * used / spent:.3f} % of one core;"
          f" RSS {rss:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
