"""A command skill does not outlive its daemon: after a kill -9 of ``butler serve`` the
running command is ended by the kernel (PR_SET_PDEATHSIG), not re-parented to PID 1."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.support import (
    ServeProcess,
    command_skill,
    config_dict,
    kill_quietly,
    wait_gone,
    write_config,
)

SLEEPER = ("import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
           "time.sleep(60)")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
async def test_a_running_command_skill_ends_with_a_killed_daemon(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    skill = command_skill("sleeper", [sys.executable, "-c", SLEEPER, str(pid_file)])
    cfg, tokens = config_dict(tmp_path, "home", skills=[skill])
    config = write_config(tmp_path, "home", cfg)
    auth = {"Authorization": f"Bearer {tokens['operator']}"}
    server = await ServeProcess.start(config, tmp_path / "serve.log")
    try:
        async with aiohttp.ClientSession() as http, http.post(
                f"{server.url}/v2/tasks", headers=auth,
                json={"task": "x", "skill": "sleeper", "mode": "async"}) as resp:
            assert resp.status == 202
        async with asyncio.timeout(10):
            while not (pid_file.exists() and pid_file.read_text()):
                await asyncio.sleep(0.02)
        child = int(pid_file.read_text())
        os.kill(child, 0)  # running
    finally:
        await server.kill9()
    try:
        await wait_gone(child, timeout=10)
    finally:
        kill_quietly(child)  # only if the test failed: leave no sleeper behind
