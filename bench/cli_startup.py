"""How long the ``butler`` command takes before and while it does its work.

    .venv/bin/python bench/cli_startup.py [--runs 21]

Times three commands as an operator runs them, each as a fresh process: ``python -m
butler --help``, ``butler token new`` (the installed entry point) and ``butler send`` of an
echo task to a ``butler serve`` started here on loopback. Prints the median and the
fastest of ``--runs`` runs, in wall time and in the command's CPU time (user + system,
which other work on a shared machine inflates less). The numbers and the machine are in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from hashlib import sha256
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # children waited for so far
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], env: dict[str, str], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each run."""
    subprocess.run(argv, env=env, check=True, capture_output=True, cwd=REPO)  # warm the cache
    times, cpu = [], []
    for _ in range(runs):
        cpu_before = _children_cpu()
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True, cwd=REPO)
        times.append(time.perf_counter() - start)
        cpu.append(_children_cpu() - cpu_before)
    return times, cpu


def start_daemon(folder: Path, token: str) -> tuple[subprocess.Popen[bytes], str]:
    config = folder / "bench.yaml"
    config.write_text(
        "agent: {id: bench}\n"
        f"data_dir: {folder / 'data'}\n"
        "configurations:\n"
        "  a2a: {enabled: true, port: 0, bind_address: 127.0.0.1, token_hashes: ["
        f"{sha256(token.encode()).hexdigest()}]}}\n"
        "logging: {level: warning}\n"
        "skills: [{id: echo, builtin: echo, capabilities: [echo], expose: true}]\n")
    proc = subprocess.Popen([str(BIN / "butler"), "serve", "-c", str(config)],
                            stdout=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if " serving on " not in line:
        proc.kill()
        raise SystemExit(f"the daemon did not start: {line!r}")
    return proc, line.rsplit(" ", 1)[1].strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    env = dict(os.environ)
    token = secrets.token_hex(32)
    env["BUTLER_TOKEN"] = token
    results: dict[str, tuple[list[float], list[float]]] = {
        "python -m butler --help": timed([sys.executable, "-m", "butler", "--help"], env,
                                         args.runs),
        "butler token new": timed([str(BIN / "butler"), "token", "new"], env, args.runs),
    }
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_daemon(Path(tmp), token)
        try:
            results["butler send (echo, local daemon)"] = timed(
                [str(BIN / "butler"), "send", url, "hi", "--skill", "echo"], env, args.runs)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"{'command':<36} {'median':>8} {'fastest':>8} {'CPU med':>8} {'CPU min':>8}"
          f"   ({args.runs} runs, ms)")
    for name, (times, cpu) in results.items():
        print(f"{name:<36} {statistics.median(times) * 1000:8.0f} {min(times) * 1000:8.0f}"
              f" {statistics.median(cpu) * 1000:8.0f} {min(cpu) * 1000:8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
