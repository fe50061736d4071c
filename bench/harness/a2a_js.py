"""The @a2a-js/sdk reference: a Node server (bench/a2a_js/server.mjs) with the SDK's
default InMemoryTaskStore, installed from bench/a2a_js/package-lock.json with ``npm ci``
into bench/a2a_js/node_modules (git-ignored) when the lock file changes.

Node and npm come from Debian (``apt-get install nodejs npm``); the bench does not install
them. Without them, or with a Node older than the SDK needs, this column is skipped with
the reason, and the rest of the run goes on."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

from harness.bootstrap import BENCH

HOME = BENCH / "a2a_js"
SERVER = HOME / "server.mjs"
_STAMP = HOME / "node_modules" / ".bench-installed"
MIN_NODE = 20  # "engines" of @a2a-js/sdk


def sdk_version() -> str:
    lock = json.loads((HOME / "package-lock.json").read_text())
    return str(lock["packages"]["node_modules/@a2a-js/sdk"]["version"])


def node_version() -> str | None:
    node = shutil.which("node")
    if node is None:
        return None
    done = subprocess.run([node, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def ensure_installed() -> str | None:
    """None when the server can run; else why not (the table shows it)."""
    version = node_version()
    if version is None or shutil.which("npm") is None:
        return "skipped: node and npm are not installed (apt-get install nodejs npm)"
    if int(version.lstrip("v").split(".")[0]) < MIN_NODE:
        return f"skipped: node {version} is older than {MIN_NODE}, which @a2a-js/sdk needs"
    stamp = hashlib.sha256((HOME / "package-lock.json").read_bytes()).hexdigest()
    if _STAMP.exists() and _STAMP.read_text() == stamp:
        return None
    print("[bench]   npm ci in bench/a2a_js (@a2a-js/sdk, express)", file=sys.stderr)
    done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                          cwd=HOME, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"skipped: npm ci failed: {done.stderr.strip()[-300:]}"
    _STAMP.write_text(stamp)
    return None


def argv(token_hash: str) -> list[str]:
    node = shutil.which("node") or "node"
    return [node, str(SERVER), "--token-hash", token_hash]
