"""The official JavaScript SDK (@a2a-js/sdk) as a peer: ``tests/js_agent/agent.mjs``, run
by Node as a subprocess. Its packages are installed from ``tests/js_agent/package-lock.json``
with ``npm ci`` into ``tests/js_agent/node_modules`` (git-ignored), once, and again only
when the lock file changes. Without Node 20+ and npm the tests that need it are skipped,
with the reason (Debian: ``apt-get install nodejs npm``; ``.ci/run`` installs them)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

HOME = Path(__file__).resolve().parent / "js_agent"
MIN_NODE = 20  # the "engines" of @a2a-js/sdk
_STAMP = HOME / "node_modules" / ".butler-tests-installed"


def js_sdk_missing() -> str | None:
    """None when the agent can run (installing its packages first if needed), else why not."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return "the @a2a-js/sdk peer needs node and npm (Debian: apt-get install nodejs npm)"
    version = subprocess.run([node, "--version"], capture_output=True, text=True,
                             check=False).stdout.strip()
    if int(version.lstrip("v").split(".")[0] or 0) < MIN_NODE:
        return f"node {version} is older than {MIN_NODE}, which @a2a-js/sdk needs"
    stamp = hashlib.sha256((HOME / "package-lock.json").read_bytes()).hexdigest()
    with open(HOME / ".npm-ci.lock", "w") as lock:  # one install at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (_STAMP.exists() and _STAMP.read_text() == stamp):
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                                  cwd=HOME, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"npm ci in {HOME} failed: {done.stderr[-2000:]}")
            _STAMP.write_text(stamp)
    return None


@dataclass
class JsAgent:
    """A running agent: its base URL, and what it saw and holds, asked over HTTP."""

    url: str
    token: str
    session: aiohttp.ClientSession

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "A2A-Version": "1.0"}

    async def seen(self) -> dict[str, list[Any]]:
        """``messages`` (taskId, contextId, text), ``working`` (tasks a ``wait`` agent
        began) and ``cancels`` (the task id of each cancel it received)."""
        async with self.session.get(f"{self.url}/test/seen", headers=self.headers()) as resp:
            assert resp.status == 200, await resp.text()
            found: dict[str, list[Any]] = await resp.json()
            return found

    async def state(self, task_id: str) -> str:
        """The state of one of its tasks, as its own store holds it (``GetTask``)."""
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
        async with self.session.post(f"{self.url}/", json=body, headers=self.headers()) as resp:
            answer = await resp.json()
        assert "result" in answer, answer
        return str(answer["result"]["status"]["state"])


@contextlib.asynccontextmanager
async def js_agent(session: aiohttp.ClientSession, token: str, *, mode: str = "task"
                   ) -> AsyncIterator[JsAgent]:
    """``node tests/js_agent/agent.mjs`` in ``mode`` (task, ask, wait) until the block ends;
    it accepts ``token`` only."""
    token_hash = hashlib.sha256(token.encode()).hexdigest()
    # Its errors go to a file, not a pipe: nobody reads them while it runs.
    with tempfile.TemporaryFile() as errors:
        proc = await asyncio.create_subprocess_exec(
            shutil.which("node") or "node", str(HOME / "agent.mjs"), "--token-hash",
            token_hash, "--mode", mode, stdout=asyncio.subprocess.PIPE, stderr=errors)
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            if not line:
                await proc.wait()
                errors.seek(0)
                raise RuntimeError(f"the JS agent did not start: {errors.read()[-2000:]!r}")
            port = json.loads(line)["port"]
            yield JsAgent(f"http://127.0.0.1:{port}", token, session)
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
