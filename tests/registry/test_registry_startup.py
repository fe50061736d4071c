"""``butler registry serve`` start-up failures leave nothing behind and say so in one
line with exit code 2; a second registry on the same SQLite folder touches nothing."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from butler.registry.cli import serve
from tests.registry.registry_support import config
from tests.registry.test_registry_cli import GOOD, ROOT, cli_env, run_cli, write_config

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts /proc fds")


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


async def test_a_port_in_use_leaves_no_thread_task_or_file(
    tmp_path: Path, taken_port: int, capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = config(port=taken_port, store=f"sqlite:{tmp_path / 'state' / 'registry.db'}")
    threads = {t.ident for t in threading.enumerate()}
    tasks = asyncio.all_tasks()
    fds = set(os.listdir("/proc/self/fd"))
    assert await serve(cfg) == 2
    assert {t.ident for t in threading.enumerate()} == threads
    assert asyncio.all_tasks() == tasks
    assert set(os.listdir("/proc/self/fd")) == fds
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("butler: cannot start: "), err
    assert str(taken_port) in err[0]


def test_serve_on_a_port_in_use_exits_2_with_one_line(tmp_path: Path, taken_port: int) -> None:
    path = write_config(tmp_path, GOOD.replace("port: 0", f"port: {taken_port}"))
    result = run_cli("serve", "-c", str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and str(taken_port) in lines[0], lines


def test_a_second_registry_on_the_same_folder_exits_2_and_the_first_serves_on(
    tmp_path: Path,
) -> None:
    path = write_config(tmp_path, GOOD)
    first = subprocess.Popen(
        [sys.executable, "-m", "butler.registry.cli", "registry", "serve", "-c", str(path)],
        cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert first.stdout is not None
        line = first.stdout.readline()
        url = line.split()[4]
        second = run_cli("serve", "-c", str(path))  # port 0: another port
        assert second.returncode == 2
        assert second.stderr.splitlines() == [
            f"butler: cannot start: data folder {tmp_path / 'state'} is in use by "
            f"another butler (pid {first.pid})"]
        assert asyncio.run(_health(url)) == 200
    finally:
        first.terminate()
        first.communicate(timeout=20)
    assert first.returncode == 0


async def _health(url: str) -> int:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/healthz") as resp:
        return resp.status
