"""``butler top`` the way a person sees it: in a tmux pane of a fixed size, next to real
daemons; home delegates to office, whose skill waits until the test lets it finish."""

from __future__ import annotations

import asyncio
import shlex
import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.delegation_support import Mesh
from tests.support import REPO, gated_skill, post_task, run_cli, wait_until

TMUX = shutil.which("tmux")
needs_tmux = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")


async def _tmux(socket: str, *args: str) -> str:
    assert TMUX is not None
    proc = await asyncio.create_subprocess_exec(
        TMUX, "-L", socket, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


class Pane:
    """One tmux session on a server of its own (``-L``): no other tmux user is touched."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    async def screen(self) -> str:
        return await _tmux(self.socket, "capture-pane", "-p", "-t", "top")

    async def wait_for(self, *texts: str, timeout: float = 20.0) -> str:
        """The screen once it shows every one of ``texts``."""
        screen = ""

        async def shows() -> str | None:
            nonlocal screen
            screen = await self.screen()
            return screen if all(text in screen for text in texts) else None

        try:
            return await wait_until(shows, timeout)
        except AssertionError:
            raise AssertionError(f"never saw {texts!r}; the screen:\n{screen}") from None

    async def keys(self, *keys: str) -> None:
        await _tmux(self.socket, "send-keys", "-t", "top", *keys)


@pytest.fixture
async def pane(tmp_path: Path) -> AsyncIterator[Pane]:
    socket = f"butler-top-{uuid.uuid4().hex[:8]}"
    await _tmux(socket, "new-session", "-d", "-s", "top", "-x", "160", "-y", "40",
                "-c", str(REPO), "sh")
    try:
        yield Pane(socket)
    finally:
        await _tmux(socket, "kill-server")


@needs_tmux
async def test_top_shows_a_delegated_task_working_then_completed(
        mesh: Mesh, pane: Pane, tmp_path: Path) -> None:
    release = tmp_path / "go"
    wait = gated_skill("office.wait", release, capabilities=["office.wait"], cost_usd="0.03")
    mesh.agent("home", skills=[])
    mesh.agent("office", skills=[wait])
    mesh.link("home", "office", ["office.wait"])
    agents = await mesh.start()
    home = agents["home"]
    token_file = tmp_path / "operator.token"
    token_file.write_text(home.tokens["operator"])
    rc = tmp_path / "rc"
    command = (f"{shlex.quote(sys.executable)} -m butler top {home.url} "
               f"--token-file {token_file}; echo exit=$? > {rc}")
    await pane.keys(command, "Enter")
    await pane.wait_for(f"butler top  {home.url}", "RUNNING (0)", "RECENT (0)")

    status, task = await post_task(home, {"task": "wait for me", "mode": "async",
                                          "capabilities_needed": ["office.wait"]})
    assert status in (200, 201, 202), task
    screen = await pane.wait_for("RUNNING (1)", task["id"])
    row = next(line for line in screen.splitlines() if task["id"] in line)
    assert "working" in row and "a2a.delegate" in row

    release.write_text("")
    screen = await pane.wait_for("RUNNING (0)", "RECENT (1)", "completed",
                                 "office / office.wait: 0.03 USD")
    lines = screen.splitlines()
    at = next(i for i, line in enumerate(lines) if task["id"] in line)
    assert "completed" in lines[at] and "0.03 of " in lines[at]
    # The tree: home's hop, office's below it, indented one step further.
    assert lines[at + 1].lstrip().startswith("home / a2a.delegate: ")
    assert lines[at + 2].lstrip().startswith("office / office.wait: 0.03 USD, ")
    assert lines[at + 2].index("office") > lines[at + 1].index("home")

    await pane.keys("C-c")
    await wait_until(lambda: rc.exists() and rc.read_text(), 20, "top's exit code")
    assert rc.read_text().strip() == "exit=0"


async def test_top_once_and_a_wrong_token(mesh: Mesh) -> None:
    mesh.agent("home")
    home = (await mesh.start())["home"]
    code, out, err = await run_cli("top", home.url, "--once", token=home.tokens["operator"])
    assert code == 0, err
    assert "\x1b" not in out
    assert out.splitlines()[0].startswith(f"butler top  {home.url}  ")
    assert "RUNNING (0)" in out and "RECENT (0)" in out
    code, out, err = await run_cli("top", home.url, token="wrong")
    assert code == 1 and out == ""
    assert err.startswith("butler: unauthenticated")


async def test_top_reads_the_url_from_a_config(mesh: Mesh, tmp_path: Path) -> None:
    mesh.agent("home")
    home = (await mesh.start())["home"]
    code, out, err = await run_cli("top", "-c", str(home.config_path), "--once",
                                   token=home.tokens["operator"])
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"butler top  {home.url}  ")
    missing = tmp_path / "nowhere.yaml"
    code, out, err = await run_cli("top", "-c", str(missing), "--once", token="x")
    assert code == 2 and out == ""
    assert err.startswith("butler: ") and str(missing) in err
