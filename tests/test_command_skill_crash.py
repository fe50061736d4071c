"""A command skill's processes do not outlive its task, nor its daemon.

The command itself ends with a killed daemon (PR_SET_PDEATHSIG); what it started in its
process group is ended by the next start-up on the same data folder, from the record in
``<data_dir>/runs/``; an orderly end of the task (done, cancelled, timed out) ends the
whole group at once. Linux only: the kernel's parent-death signal and ``/proc``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from butler.skills.run_ledger import RunLedger
from tests.support import (
    ServeProcess,
    Swarm,
    call,
    command_skill,
    config_dict,
    kill_quietly,
    post_task,
    process_gone,
    wait_gone,
    wait_task,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="PR_SET_PDEATHSIG and /proc are Linux's")

# argv: PID_FILE MODE. Starts a grandchild in its own group, writes "LEADER GRANDCHILD"
# to PID_FILE, then blocks ("block"), blocks ignoring SIGTERM, as its grandchild does
# ("stubborn"), or exits at once leaving the grandchild behind ("detached").
SPAWNER = """\
import os, signal, subprocess, sys, time
pid_file, mode = sys.argv[1], sys.argv[2]
if mode == 'stubborn':
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
quiet = subprocess.DEVNULL if mode == 'detached' else None
child = subprocess.Popen(['sleep', '1000'], stdout=quiet, stderr=quiet)
with open(pid_file + '.tmp', 'w') as f:
    f.write(f'{os.getpid()} {child.pid}')
os.rename(pid_file + '.tmp', pid_file)
if mode == 'detached':
    print('done')
    sys.exit(0)
time.sleep(60)
"""


def spawner(tmp_path: Path, skill_id: str, mode: str, **extra: object) -> dict[str, object]:
    script = tmp_path / "spawner.py"
    script.write_text(SPAWNER)
    return command_skill(skill_id, [sys.executable, str(script),
                                    str(tmp_path / f"{skill_id}.pids"), mode], **extra)


async def spawned(pid_file: Path) -> tuple[int, int]:
    """(leader, grandchild), once the command has started both."""
    await wait_until(pid_file.exists, what="the command started both")
    leader, grandchild = pid_file.read_text().split()
    return int(leader), int(grandchild)


@contextlib.contextmanager
def reaping(*pid_files: Path) -> Iterator[None]:
    """Leave no process behind, whatever the test's outcome."""
    try:
        yield
    finally:
        for pid_file in pid_files:
            if pid_file.exists():
                for pid in pid_file.read_text().split():
                    kill_quietly(int(pid))


async def no_records(data_dir: Path) -> None:
    await wait_until(lambda: not list((data_dir / "runs").iterdir()), what="no run records")


async def test_a_running_command_skill_ends_with_a_killed_daemon(tmp_path: Path) -> None:
    """A kill -9 with a running command skill: the command dies with the daemon, the
    process it started in its group survives the kill, and the next start ends it."""
    pid_file = tmp_path / "spawner.pids"
    cfg, tokens = config_dict(tmp_path, "home", skills=[spawner(tmp_path, "spawner", "block")])
    config = write_config(tmp_path, "home", cfg)
    data_dir = Path(cfg["data_dir"])
    auth = {"Authorization": f"Bearer {tokens['operator']}"}
    with reaping(pid_file):
        server = await ServeProcess.start(config, tmp_path / "serve.log")
        try:
            async with aiohttp.ClientSession() as http, http.post(
                    f"{server.url}/v2/tasks", headers=auth,
                    json={"task": "x", "skill": "spawner", "mode": "async"}) as resp:
                assert resp.status == 202
                task_id = (await resp.json())["id"]
            leader, grandchild = await spawned(pid_file)
            [record_file] = (data_dir / "runs").iterdir()
            assert record_file.stat().st_mode & 0o777 == 0o600
            record = json.loads(record_file.read_text())
            assert (record["pgid"], record["task_id"]) == (leader, task_id)
            assert record["daemon_pid"] == server.proc.pid
        finally:
            await server.kill9()
        await wait_gone(leader, timeout=10)
        assert not process_gone(grandchild)  # re-parented, in the group, running on

        again = await ServeProcess.start(config, tmp_path / "serve.log")
        try:
            await wait_gone(grandchild, timeout=10)
            assert list((data_dir / "runs").iterdir()) == []
            assert (f"ended process group {leader} of a command skill that butler pid "
                    f"{server.proc.pid} left running for task {task_id}"
                    ) in again.log_path.read_text()
        finally:
            await again.stop()


async def test_cancel_ends_the_whole_group(swarm: Swarm, tmp_path: Path) -> None:
    pid_file = tmp_path / "spawner.pids"
    home = await swarm.start("home", skills=[spawner(tmp_path, "spawner", "block")])
    with reaping(pid_file):
        status, task = await post_task(home, {"task": "x", "skill": "spawner", "mode": "async"})
        assert status == 202
        leader, grandchild = await spawned(pid_file)
        status, canceled = await call(home, "POST", f"/v2/tasks/{task['id']}/cancel")
        assert status == 200 and canceled["state"] == "canceled"
        await wait_gone(leader)
        await wait_gone(grandchild)
        await no_records(tmp_path / "home")


async def test_a_timeout_ends_a_group_that_ignores_sigterm(swarm: Swarm,
                                                           tmp_path: Path) -> None:
    """SIGTERM first, then SIGKILL for what is left after the grace."""
    pid_file = tmp_path / "stubborn.pids"
    home = await swarm.start("home", skills=[
        spawner(tmp_path, "stubborn", "stubborn", timeout_seconds=1)])
    with reaping(pid_file):
        status, task = await post_task(home, {"task": "x", "skill": "stubborn",
                                              "mode": "async"})
        assert status == 202
        leader, grandchild = await spawned(pid_file)
        final = await wait_task(home, task["id"])
        assert final["error"]["code"] == "task_timeout"
        await wait_gone(leader)
        await wait_gone(grandchild)
        await no_records(tmp_path / "home")


async def test_a_finished_command_leaves_nothing_behind(swarm: Swarm, tmp_path: Path) -> None:
    pid_file = tmp_path / "detached.pids"
    home = await swarm.start("home", skills=[spawner(tmp_path, "detached", "detached")])
    with reaping(pid_file):
        status, task = await post_task(home, {"task": "x", "skill": "detached"})
        assert status == 200 and task["output"] == "done", task
        _, grandchild = await spawned(pid_file)
        await wait_gone(grandchild)
        await no_records(tmp_path / "home")


# --- start-up: a record is acted on only while it surely names the same processes ----

@contextlib.contextmanager
def session(argv: list[str], **env: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE,
                            env={**os.environ, **env})
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def forge(ledger: RunLedger, run_id: str, **changes: object) -> None:
    path = ledger.folder / f"{run_id}.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_a_recycled_pid_is_never_killed(tmp_path: Path) -> None:
    """A record whose leader's start time (or boot) is not the living process's names a
    process that had the pid before: it is forgotten, and the process left alone, though
    it carries the run's id."""
    ledger = RunLedger(tmp_path / "runs")
    with session(["sleep", "60"], BUTLER_RUN_ID="run-1") as proc:
        record = ledger.started("run-1", proc.pid, "task-1")
        assert record.start_time is not None
        for forged in ({"start_time": record.start_time + 1}, {"boot_id": "another-boot"}):
            forge(ledger, "run-1", **forged)
            assert ledger.end_leftovers() == 0
            assert proc.poll() is None
            assert list(ledger.folder.iterdir()) == []
            ledger.started("run-1", proc.pid, "task-1")
        assert ledger.end_leftovers() == 1
        assert proc.wait(timeout=10) == -signal.SIGKILL


async def test_a_leaderless_group_is_ended_only_by_its_run_id(tmp_path: Path) -> None:
    """A member must carry the run's id in its environment (here, with the leader gone,
    nothing else could tell the group from a later one of the same id)."""
    ledger = RunLedger(tmp_path / "runs")
    argv = ["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"]
    with session(argv, BUTLER_RUN_ID="theirs") as leader:
        assert leader.stdout is not None
        member = int(leader.stdout.readline())
        try:
            leader.wait(timeout=10)
            ledger.started("ours", leader.pid, "task-1")
            assert ledger.end_leftovers() == 0
            assert not process_gone(member)

            ledger.started("theirs", leader.pid, "task-2")
            assert ledger.end_leftovers() == 1
            await wait_gone(member)
        finally:
            kill_quietly(member)
