"""Install what the bench needs, then re-run it inside bench/.venv (standard library only).

- Debian packages: ``wrk`` (the load generator), ``redis-server`` (the Redis registry
  store) and ``util-linux`` (``taskset``), through apt-get when missing and we are root
  (or ``sudo -n`` works).
- A virtualenv at bench/.venv with ``pip install -e '.[bench]'`` from the repo root,
  redone whenever pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
REPO = BENCH.parent
VENV = BENCH / ".venv"
VENV_PYTHON = VENV / "bin" / "python"
_STAMP = VENV / ".bench-installed"
_APT = {"wrk": "wrk", "redis-server": "redis-server", "taskset": "util-linux"}


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _apt_install(packages: list[str]) -> None:
    if os.geteuid() == 0:
        prefix: list[str] = []
    elif shutil.which("sudo"):
        prefix = ["sudo", "-n"]
    else:
        say(f"cannot install {', '.join(packages)}: not root and no sudo")
        return
    if not shutil.which("apt-get"):
        say(f"cannot install {', '.join(packages)}: no apt-get on this machine")
        return
    say(f"installing Debian packages: {', '.join(packages)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run([*prefix, "apt-get", "update", "-qq"], check=False, env=env)
    subprocess.run([*prefix, "apt-get", "install", "-y", "-qq", *packages], check=False,
                   env=env, stdout=subprocess.DEVNULL)


def ensure_tools() -> None:
    missing = sorted({pkg for tool, pkg in _APT.items() if shutil.which(tool) is None})
    if missing:
        _apt_install(missing)
    for tool in _APT:
        if shutil.which(tool) is None:
            say(f"warning: {tool} is still missing; scenarios that need it are skipped")


def _stamp_value() -> str:
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()
    return f"{sys.version_info[:2]} {digest}"


def ensure_venv() -> None:
    if not VENV_PYTHON.exists():
        say(f"creating {VENV.relative_to(REPO)}")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV_PYTHON), "-m", "pip", "install", "-q", "--upgrade", "pip"],
                       check=True)
    if _STAMP.exists() and _STAMP.read_text() == _stamp_value():
        return
    say("installing the project with its bench extra (pip install -e '.[bench]')")
    subprocess.run([str(VENV_PYTHON), "-m", "pip", "install", "-q", "-e", ".[bench]"],
                   check=True, cwd=REPO)
    _STAMP.write_text(_stamp_value())


def in_bench_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def reexec_in_venv(script: Path, argv: list[str]) -> None:
    """Replace this process with the same script run by the venv's Python."""
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(script), *argv])
