"""Every start-up failure of ``butler serve`` leaves nothing behind and says so in one
line: in-process, the threads, asyncio tasks and file descriptors are back to what they
were; as a process, exit code 2 and one line on stderr. A second daemon on a data folder
in use stops before it touches anything."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from butler.config import load_config
from butler.daemon import Daemon
from butler.delegation.wiring import make_delegator
from butler.skills.plugin import PluginError
from butler.storage.data_folder import DataFolderInUse
from tests.support import (
    ECHO,
    REPO,
    ServeProcess,
    Swarm,
    child_env,
    config_dict,
    gated_skill,
    plugin_skill,
    wait_task,
    write_config,
)


@dataclass(frozen=True)
class Leftovers:
    threads: frozenset[int]
    tasks: frozenset[asyncio.Task[Any]]
    fds: frozenset[str]

    @classmethod
    def now(cls) -> Leftovers:
        return cls(frozenset(t.ident or 0 for t in threading.enumerate()),
                   frozenset(asyncio.all_tasks()), frozenset(os.listdir("/proc/self/fd")))


async def failed_start(daemon: Daemon, error: type[BaseException]) -> None:
    before = Leftovers.now()
    with pytest.raises(error):
        await daemon.start()
    after = Leftovers.now()
    assert after.threads == before.threads
    assert after.tasks == before.tasks
    # Open files by target: an fd number may be reused, a leaked one shows as extra.
    assert after.fds == before.fds, {fd: _target(fd) for fd in after.fds - before.fds}


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


def _daemon(tmp_path: Path, agent_id: str, **kwargs: Any) -> Daemon:
    cfg, _ = config_dict(tmp_path, agent_id, **kwargs)
    return Daemon(load_config(write_config(tmp_path, agent_id, cfg)),
                  delegator_factory=make_delegator)


pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts /proc fds")


async def test_a_port_in_use_leaves_no_thread_task_or_file(swarm: Swarm, tmp_path: Path) -> None:
    home = await swarm.start("home")
    taken = home.daemon.port
    office = _daemon(tmp_path, "office", configurations={"a2a": {"port": taken}},
                     extra={"metrics": {"enabled": True}})
    await failed_start(office, OSError)
    # The data folder is free again: the same daemon starts on a free port.
    again = _daemon(tmp_path, "office")
    await again.start()
    await again.stop()


async def test_a_bad_plugin_leaves_nothing_open(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path, "home",
                     skills=[ECHO, plugin_skill("ghost", "tests.plugins.no_such_module:run")])
    await failed_start(daemon, PluginError)


async def test_a_data_folder_in_use_is_refused_before_anything_opens(
    swarm: Swarm, tmp_path: Path,
) -> None:
    await swarm.start("home")
    cfg, _ = config_dict(tmp_path, "home")
    second = Daemon(load_config(write_config(tmp_path, "second", cfg)))
    await failed_start(second, DataFolderInUse)


async def _serve_fails(config_path: Path) -> tuple[int, list[str]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "butler", "serve", "-c", str(config_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO,
        env=child_env())
    async with asyncio.timeout(30):
        out, err = await proc.communicate()
    assert out == b""
    assert proc.returncode is not None
    return proc.returncode, err.decode().splitlines()


@pytest.fixture
async def home_process(tmp_path: Path) -> AsyncIterator[tuple[ServeProcess, dict[str, Any],
                                                              dict[str, str]]]:
    gate = tmp_path / "gate"
    cfg, tokens = config_dict(tmp_path, "home", skills=[
        ECHO, gated_skill("gated", gate)])
    server = await ServeProcess.start(write_config(tmp_path, "home", cfg), tmp_path / "home.log")
    try:
        yield server, cfg, tokens
    finally:
        gate.touch()
        await server.stop()


async def test_serve_on_a_port_in_use_exits_2_with_one_line(
    home_process: tuple[ServeProcess, dict[str, Any], dict[str, str]], tmp_path: Path,
) -> None:
    server, _, _ = home_process
    port = int(server.url.rsplit(":", 1)[1])
    cfg, _ = config_dict(tmp_path, "office", configurations={"a2a": {"port": port}})
    code, lines = await _serve_fails(write_config(tmp_path, "office", cfg))
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("butler: cannot start: "), lines
    assert str(port) in lines[0]


async def test_serve_with_a_bad_plugin_exits_2_with_one_line(tmp_path: Path) -> None:
    cfg, _ = config_dict(tmp_path, "home",
                         skills=[ECHO, plugin_skill("ghost", "tests.plugins.no_such:run")])
    code, lines = await _serve_fails(write_config(tmp_path, "home", cfg))
    assert code == 2
    assert len(lines) == 1 and "cannot import tests.plugins.no_such" in lines[0], lines


async def test_serve_on_a_data_folder_it_cannot_create_exits_2_with_one_line(
    tmp_path: Path,
) -> None:
    # A file where a folder should be: unusable even for root, unlike a mode-0500 folder.
    (tmp_path / "file").write_text("")
    cfg, _ = config_dict(tmp_path, "home", extra={"data_dir": str(tmp_path / "file" / "home")})
    code, lines = await _serve_fails(write_config(tmp_path, "home", cfg))
    assert code == 2
    assert len(lines) == 1 and "Not a directory" in lines[0], lines


async def test_a_second_daemon_on_the_same_data_folder_touches_nothing(
    home_process: tuple[ServeProcess, dict[str, Any], dict[str, str]], tmp_path: Path,
    http: aiohttp.ClientSession,
) -> None:
    server, cfg, tokens = home_process
    auth = {"Authorization": f"Bearer {tokens['operator']}"}
    async with http.post(f"{server.url}/v2/tasks", headers=auth,
                         json={"task": "x", "skill": "gated", "mode": "async"}) as resp:
        task = await resp.json()
    home = _Remote(server.url, http, tokens)
    await wait_task(home, task["id"], {"working"})  # type: ignore[arg-type]

    # Same config, so the same data folder; port 0, so another port.
    code, lines = await _serve_fails(write_config(tmp_path, "second", cfg))
    assert code == 2
    assert lines == [f"butler: cannot start: data folder {cfg['data_dir']} is in use by "
                     f"another butler (pid {server.proc.pid})"]

    still = await wait_task(home, task["id"], {"working"})  # type: ignore[arg-type]
    assert still["state"] == "working"
    (tmp_path / "gate").touch()
    done = await wait_task(home, task["id"])  # type: ignore[arg-type]
    assert done["state"] == "completed", done


@dataclass
class _Remote:
    """Enough of ``tests.support.Instance`` for ``wait_task`` against a process."""

    url: str
    session: aiohttp.ClientSession
    tokens: dict[str, str]

    def headers(self, who: str = "operator") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}
