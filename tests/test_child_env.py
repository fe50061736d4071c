"""A command skill's process gets the daemon's environment without the variables the
config read tokens from: a peer's token is sent to that peer only, never handed to a
child process. A real daemon on port 0; the command prints what it was given."""

from __future__ import annotations

import sys

import pytest

from tests.support import Swarm, command_skill, post_task

PRINT_ENV = ("import json, os, sys\n"
             "sys.stdin.read()\n"
             "print(json.dumps(sorted(k for k in os.environ if k.startswith('CHILD_ENV_'))))\n")


async def test_a_command_skill_never_sees_a_token_variable(
        swarm: Swarm, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHILD_ENV_PEER_TOKEN", "peer-token-0123456789abcdef")
    monkeypatch.setenv("CHILD_ENV_PLAIN", "kept")
    home = await swarm.start(
        "home", skills=[command_skill("env", [sys.executable, "-c", PRINT_ENV])],
        peers=[{"name": "office", "url": "http://127.0.0.1:9",
                "token_env": "CHILD_ENV_PEER_TOKEN", "capabilities": ["x"]}])
    status, task = await post_task(home, {"task": "show", "skill": "env"})
    assert status == 200 and task["state"] == "completed", task
    assert task["output"].strip() == '["CHILD_ENV_PLAIN"]'
