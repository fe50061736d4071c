"""Profiling: py-spy samples a Butler daemon while wrk loads it with 64 connections; the
collapsed stacks are reduced to the top functions (self and inclusive) and per-thread
shares, in percent of all samples. Not part of the measured numbers (sampling with
py-spy pauses the process briefly for every sample)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from harness import butlers, wrk
from harness.bootstrap import REPO, VENV
from harness.procs import Cpus, pinned
from harness.profile_summary import summarise


def run(work: Path, cpus: Cpus, seconds: float) -> dict[str, Any]:
    spy = VENV / "bin" / "py-spy"
    if not spy.exists() and shutil.which("py-spy") is None:
        return {"skipped": "py-spy is not installed"}
    spy_cmd = str(spy) if spy.exists() else "py-spy"
    folder = work / "profile"
    folder.mkdir(parents=True, exist_ok=True)
    butler = butlers.start_single(folder, cpus.server)
    raw = folder / "butler-v2-c64.txt"
    try:
        load = wrk.Load(path="/v2/tasks", body=butlers.v2_body(), tokens=(butler.token,),
                        expect='"state":"completed"')
        wrk.run(butler.url, load, connections=64, seconds=2, cpu=cpus.load)  # warm-up
        outcome: dict[str, Any] = {}
        loader = threading.Thread(target=lambda: outcome.update(result=wrk.run(
            butler.url, load, connections=64, seconds=seconds + 2, cpu=cpus.load)))
        loader.start()
        done = subprocess.run(
            pinned([spy_cmd, "record", "--pid", str(butler.server.pid), "--duration",
                    str(max(1, round(seconds))), "--rate", "250", "--format", "raw",
                    "--threads", "--full-filenames", "-o", str(raw)], cpus.load),
            capture_output=True, text=True, check=False)
        loader.join()
    finally:
        butler.server.stop()
    if done.returncode != 0 or not raw.exists():
        print(f"[bench]   py-spy failed: {done.stderr[-500:]}", file=sys.stderr)
        return {"skipped": f"py-spy failed: {done.stderr.strip()[-300:]}"}
    summary = summarise(raw)
    summary["load_during_profile"] = outcome["result"].to_json() if "result" in outcome else None
    summary["raw_stacks"] = str(raw.relative_to(REPO))
    return summary
