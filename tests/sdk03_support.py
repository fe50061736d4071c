"""The official a2a-sdk 0.3.26 as a peer. It cannot share an interpreter with the 1.x SDK
the suite imports (same package name), so it lives in its own virtualenv, made once under
``.venv/sdk03`` (a fresh machine installs it from PyPI on first use), and runs as a
subprocess: ``tests/sdk03/client.py`` (a client) and ``tests/sdk03/agent.py`` (an agent)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import subprocess
import sys
import venv
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "sdk03"
VERSION = "0.3.26"


def sdk03_python() -> Path:
    """The interpreter of the 0.3.26 virtualenv, made (under a lock) if missing."""
    home = Path(sys.prefix) / "sdk03" if sys.prefix != sys.base_prefix else ROOT / ".venv-sdk03"
    python = home / "bin" / "python"
    marker = home / f"a2a-sdk-{VERSION}.ok"
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / ".sdk03.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            venv.create(home, with_pip=True, clear=True)
            subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                            f"a2a-sdk[http-server]=={VERSION}", "uvicorn"], check=True)
            marker.write_text(VERSION)
    return python


async def run_client(python: Path, url: str, token: str, scenario: str) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        str(python), str(SCRIPTS / "client.py"), url, token, scenario,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


@contextlib.asynccontextmanager
async def sdk03_agent(python: Path, token: str, *, mode: str = "updater",
                      card: str = "new") -> AsyncIterator[str]:
    """A running ``tests/sdk03/agent.py``; yields its base URL."""
    proc = await asyncio.create_subprocess_exec(
        str(python), str(SCRIPTS / "agent.py"), token, mode, card,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        port = json.loads(line)["port"]
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
