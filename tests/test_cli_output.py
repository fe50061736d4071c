"""What the remote commands print and exit with (issue 23, item 5), as real subprocesses
against a real daemon: ``--json`` is the daemon's answer as sent, ``tasks watch`` exits by
the final state, a URL without a scheme is named."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from tests.support import (
    REPO,
    Instance,
    Swarm,
    call,
    child_env,
    command_skill,
    post_task,
    run_cli,
    sample_skills,
    wait_task,
)


async def start(swarm: Swarm) -> Instance:
    return await swarm.start("home", skills=sample_skills())


async def test_json_is_the_raw_answer_everywhere(swarm: Swarm) -> None:
    home = await start(swarm)
    token = home.tokens["operator"]
    code, out, err = await run_cli("send", home.url, "hi", "--capability", "echo", "--json",
                                   token=token)
    assert code == 0, err
    sent = json.loads(out)
    assert sent["capabilities_needed"] == ["echo"] and sent["state"] == "completed"
    code, out, err = await run_cli("tasks", "get", home.url, sent["id"], "--json", token=token)
    assert code == 0, err
    assert json.loads(out)["capabilities_needed"] == ["echo"]

    code, out, err = await run_cli("send", home.url, "later", "--capability", "echo",
                                   "--async", "--json", token=token)
    assert code == 0, err
    queued = json.loads(out)
    assert queued["id"] and queued["capabilities_needed"] == ["echo"]

    _, waiting = await post_task(home, {"task": "x", "skill": "steps"})
    code, out, err = await run_cli("tasks", "cancel", home.url, waiting["id"], "--json",
                                   token=token)
    assert code == 0, err
    canceled = json.loads(out)
    assert canceled["id"] == waiting["id"] and canceled["state"] == "canceled"

    _, waiting = await post_task(home, {"task": "x", "skill": "steps"})
    code, out, err = await run_cli("tasks", "answer", home.url, waiting["id"], "go", "--json",
                                   token=token)
    assert code == 0, err
    assert json.loads(out)["id"] == waiting["id"]


async def test_tasks_watch_exits_by_the_final_state(swarm: Swarm) -> None:
    home = await start(swarm)
    token = home.tokens["operator"]
    _, done = await post_task(home, {"task": "x", "skill": "echo"})
    _, failed = await post_task(home, {"task": "x", "skill": "fail"})
    assert (done["state"], failed["state"]) == ("completed", "failed")
    code, _, err = await run_cli("tasks", "watch", home.url, done["id"], token=token)
    assert code == 0, err
    code, out, _ = await run_cli("tasks", "watch", home.url, failed["id"], token=token)
    assert code == 1 and "failed" in out


async def test_a_url_without_a_scheme_is_named(swarm: Swarm) -> None:
    home = await start(swarm)
    bare = home.url.removeprefix("http://")
    for argv in (("send", bare, "x"), ("tasks", "list", bare), ("card", bare)):
        code, out, err = await run_cli(*argv, token=home.tokens["operator"])
        assert code == 2, (argv, out, err)
        assert err.strip() == (f"butler: {bare!r} is not a URL: give the scheme too, e.g. "
                               f"http://{bare}")


async def test_ctrl_c_during_send_says_the_task_goes_on(swarm: Swarm, tmp_path: Path) -> None:
    release = tmp_path / "go"
    home = await swarm.start("home", skills=[command_skill(
        "wait", ["sh", "-c", f"while [ ! -e {release} ]; do sleep 0.05; done; echo done"])])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "butler", "send", home.url, "x", "--skill", "wait", cwd=REPO,
        env=child_env(BUTLER_TOKEN=home.tokens["operator"]),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stderr is not None
        first = (await asyncio.wait_for(proc.stderr.readline(), 20)).decode()
        task_id = first.split()[1].rstrip(":")  # "task ID: submitted"
        await wait_task(home, task_id, {"working"})
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130, err
    assert (f"butler: interrupted; task {task_id} goes on. Follow it with: butler tasks watch "
            f"{home.url} {task_id}") in err.decode()
    assert "Traceback" not in err.decode()
    _, task = await call(home, "GET", f"/v2/tasks/{task_id}")
    assert task["state"] == "working"
    release.write_text("")
    await wait_task(home, task_id, {"completed"})


# Commands whose output is not a result: servers (their output is the protocol or the
# log), a script for the shell, a walkthrough for a person. `route` gets its --json with
# its --explain (butler/cli/route_cmd.py, issue 39's routing work).
NO_JSON = {"serve", "stdio", "mcp", "registry serve", "completion", "demo", "route"}


def test_every_command_that_answers_has_json() -> None:
    import argparse

    from butler.cli import build_parser

    def commands(parser: argparse.ArgumentParser, prefix: str) -> list[tuple[str, bool]]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return [(prefix, any("--json" in a.option_strings for a in parser._actions))]
        return [c for name, sub in subs[0].choices.items()
                for c in commands(sub, f"{prefix} {name}".strip())]

    found = dict(commands(build_parser(), ""))
    assert set(found) >= NO_JSON
    assert sorted(name for name, has in found.items() if not has and name not in NO_JSON) == []


async def test_json_of_local_commands(tmp_path: Path) -> None:
    from tests.support import config_dict, write_config

    cfg, _ = config_dict(tmp_path, "home")
    path = write_config(tmp_path, "home", cfg)
    code, out, _ = await run_cli("check-config", str(path), "--json")
    assert code == 0 and json.loads(out)["ok"] is True
    code, out, _ = await run_cli("key", "show", "-c", str(path), "--json")
    assert code == 1 and json.loads(out)["error"]["code"] == "no_identity_key"
    (tmp_path / "bad.yaml").write_text("agent: {id: x}\nnope: 1\n")
    code, out, _ = await run_cli("check-config", str(tmp_path / "bad.yaml"), "--json")
    assert code == 2 and "nope" in json.loads(out)["error"]["message"]
