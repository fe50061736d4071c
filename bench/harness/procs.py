"""Servers as child processes: start pinned to a CPU, wait for their URL, measure, stop."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from harness.bootstrap import REPO

_URL = re.compile(r"https?://[^\s)]+")
# Loopback only: never through a proxy the environment may name.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Cpus:
    """Where servers run and where the load generator runs (None: not pinned)."""

    server: str | None
    load: str | None

    @classmethod
    def detect(cls) -> Cpus:
        count = len(os.sched_getaffinity(0))
        if shutil.which("taskset") is None or count < 2:
            return cls(None, None)
        cpus = sorted(os.sched_getaffinity(0))
        return cls(str(cpus[0]), ",".join(str(c) for c in cpus[1:]))


def pinned(argv: list[str], cpu: str | None) -> list[str]:
    return ["taskset", "-c", cpu, *argv] if cpu is not None else argv


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_mb(self) -> float:
        return status_kb(self.pid, "VmRSS") / 1024

    def peak_rss_mb(self) -> float:
        return status_kb(self.pid, "VmHWM") / 1024

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def start(name: str, argv: list[str], log: Path, cpu: str | None,
          env: dict[str, str] | None = None, timeout: float = 60.0) -> Server:
    """Run ``argv``; its first stdout line must name the URL it serves on."""
    with log.open("wb") as err:
        proc = subprocess.Popen(pinned(argv, cpu), stdout=subprocess.PIPE, stderr=err,
                                cwd=REPO, env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = proc.stdout.readline().decode(errors="replace")
    match = _URL.search(line)
    if match is None or time.monotonic() > deadline:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{name} did not start ({line.strip()!r}); see {log}:\n"
                           f"{log.read_text()[-2000:]}")
    server = Server(name, proc, match.group(0).rstrip("/"), log)
    wait_http(server.url + "/healthz", timeout=timeout)
    return server


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with _OPENER.open(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answers; the status does not matter here
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def http_json(method: str, url: str, body: bytes | None = None,
              headers: dict[str, str] | None = None,
              timeout: float = 30.0) -> tuple[int, bytes]:
    """One request from the orchestrator (checks and set-up, never measured load)."""
    request = urllib.request.Request(url, data=body, method=method,
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
    try:
        with _OPENER.open(request, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
