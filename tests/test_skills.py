"""Skills through a real daemon: builtins, the command bridge, python plugins, exposure."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from tests.support import (
    ECHO,
    Instance,
    Swarm,
    call,
    command_skill,
    kill_quietly,
    plugin_skill,
    post_task,
    wait_gone,
)

PY = sys.executable
# Prints the task JSON it read on stdin inside a JSON object (so: one data part).
STDIN_TO_STDOUT = "import json, sys; print(json.dumps({'seen': json.load(sys.stdin)}))"
PARTS = ("import json; print(json.dumps({'parts': [{'text': 'two parts'}, "
         "{'data': {'ok': True}}]}))")
CHATTY = ("import json, sys; sys.stdout.write('y' * 300000); sys.stdout.flush(); "
          "print('read %d characters' % len(json.load(sys.stdin)['task']))")
FLOOD = "import sys\nwhile True: sys.stdout.write('x' * 65536)\n"
# A shell (it starts in about a millisecond, where Python under load may take longer than
# the timeout) that writes its pid, then becomes the sleep under the same pid.
HANG = ["sh", "-c", 'echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 30']


async def fails(inst: Instance, body: dict[str, Any], code: str, who: str = "operator") -> str:
    """Submit ``body``; assert it ends failed with ``code``; the daemon still serves."""
    status, task = await post_task(inst, body, who=who)
    assert status == 200, task
    assert task["state"] == "failed", task
    assert task["error"]["code"] == code, task["error"]
    assert task["status"]["message"] == task["error"]["message"]
    status, echoed = await post_task(inst, {"task": "alive?", "skill": "echo"})
    assert status == 200 and echoed["output"] == "alive?"
    message: str = task["error"]["message"]
    return message


async def test_echo_returns_text_input_and_parts(swarm: Swarm) -> None:
    home = await swarm.start("home")
    _, task = await post_task(home, {"task": "hi", "input": {"n": 1},
                                     "parts": [{"data": {"extra": True}}],
                                     "capabilities_needed": ["echo"]})
    assert task["skill"] == "echo"
    assert task["result"]["parts"] == [{"kind": "text", "text": "hi"},
                                       {"kind": "data", "data": {"n": 1}},
                                       {"kind": "data", "data": {"extra": True}}]


async def test_memory_round_trip(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[
        ECHO,
        {"id": "memory.write", "builtin": "memory.write", "expose": True},
        {"id": "memory.read", "builtin": "memory.read", "expose": True},
        {"id": "memory.search", "builtin": "memory.search", "expose": True},
    ])
    _, saved = await post_task(home, {
        "task": "The spare house key is under the blue flowerpot by the door",
        "input": {"key": "spare-key", "tags": ["house"]},
        "capabilities_needed": ["memory.write"]})
    assert saved["state"] == "completed" and saved["output"] == "saved memory spare-key"
    await post_task(home, {"task": "Buy oat milk on Friday", "skill": "memory.write"})

    _, read = await post_task(home, {"task": "", "input": {"key": "spare-key"},
                                     "skill": "memory.read"})
    assert read["output"] == "The spare house key is under the blue flowerpot by the door"
    memory = read["result"]["parts"][1]["data"]["memory"]
    assert memory["key"] == "spare-key" and memory["tags"] == ["house"]
    assert memory["source"] == "operator"

    _, found = await post_task(home, {"task": "where did I leave the spare key?",
                                      "capabilities_needed": ["memory.search"]})
    hits = found["result"]["parts"][1]["data"]["hits"]
    assert [h["memory"]["key"] for h in hits] == ["spare-key"]
    assert "flowerpot" in found["output"]

    await fails(home, {"task": "x", "input": {"tags": "x"}, "skill": "memory.write"},
                "invalid_input")
    await fails(home, {"task": "nothing-here", "skill": "memory.read"}, "memory_not_found")
    await fails(home, {"task": "q", "input": {"limit": "ten"}, "skill": "memory.search"},
                "invalid_input")


async def test_command_contract(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[
        ECHO,
        command_skill("cat", [PY, "-c", STDIN_TO_STDOUT]),
        command_skill("parts", [PY, "-c", PARTS]),
        command_skill("text", [PY, "-c", "print('plain words')"]),
        command_skill("chatty", [PY, "-c", CHATTY], timeout_seconds=10),
    ])
    _, task = await post_task(home, {"id": "cmd-1", "task": "hello", "input": {"a": 1},
                                     "context_id": "ctx", "skill": "cat"})
    seen = task["result"]["parts"][0]["data"]["seen"]
    assert seen == {"task_id": "cmd-1", "context_id": "ctx", "skill": "cat", "task": "hello",
                    "input": {"a": 1}, "parts": [], "caller": "operator",
                    "trace_id": task["swarm"]["trace_id"]}
    _, task = await post_task(home, {"task": "x", "skill": "parts"})
    assert task["result"]["parts"] == [{"kind": "text", "text": "two parts"},
                                       {"kind": "data", "data": {"ok": True}}]
    _, task = await post_task(home, {"task": "x", "skill": "text"})
    assert task["result"]["parts"] == [{"kind": "text", "text": "plain words"}]
    # Big input to a command that writes a lot before reading it: no pipe deadlock.
    _, task = await post_task(home, {"task": "z" * 200_000, "skill": "chatty"})
    assert task["state"] == "completed", task.get("error")
    assert task["output"] == "y" * 300_000 + "read 200000 characters"


async def test_command_timeout_kills_it(swarm: Swarm, tmp_path: Path) -> None:
    pid_file = tmp_path / "hang.pid"
    # Long enough for the command to have started (and written its pid) on a busy host.
    home = await swarm.start("home", skills=[
        ECHO, command_skill("hang", [*HANG, str(pid_file)],
                            timeout_seconds=2)])
    try:
        message = await fails(home, {"task": "x", "skill": "hang"}, "task_timeout")
        assert message == "task did not finish within 2s"
        await wait_gone(int(pid_file.read_text()))
        # The request may ask for less time than the skill allows, never more.
        pid_file.unlink()
        message = await fails(home, {"task": "x", "skill": "hang", "timeout_seconds": 1},
                              "task_timeout")
        assert message == "task did not finish within 1s"
        # On a loaded host the second ends before its command wrote its pid: then no
        # process of it is left to wait for.
        if pid_file.exists():
            await wait_gone(int(pid_file.read_text()))
    finally:
        if pid_file.exists():
            kill_quietly(int(pid_file.read_text()))


async def test_command_output_cap(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[
        ECHO, command_skill("flood", [PY, "-c", FLOOD], max_output_bytes=1000)])
    message = await fails(home, {"task": "x", "skill": "flood"}, "output_too_large")
    assert message == "command wrote more than 1000 bytes"


async def test_command_that_cannot_start(swarm: Swarm, tmp_path: Path) -> None:
    home = await swarm.start("home", skills=[
        ECHO, command_skill("ghost", [str(tmp_path / "no-such-program")])])
    message = await fails(home, {"task": "x", "skill": "ghost"}, "command_failed")
    assert "cannot start" in message


async def test_plugin_context_and_budget(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[
        ECHO, plugin_skill("about", "tests.plugins.sample:about", cost_usd="0.25")])
    _, task = await post_task(home, {"task": "who am i", "input": {"k": "v"}, "skill": "about",
                                     "budget": "2.00"})
    seen = task["result"]["parts"][0]["data"]
    assert seen == {"task_id": task["id"], "context_id": task["context_id"], "skill_id": "about",
                    "text": "who am i", "input": {"k": "v"}, "caller": "operator",
                    "chain": ["operator"], "trace_id": task["swarm"]["trace_id"],
                    "budget_left": "1.75"}
    assert task["budget"] == {"start_usd": "2.00", "spent_usd": "0.25", "left_usd": "1.75"}
    assert task["cost"]["cost_usd"] == "0.25" and task["cost"]["agent"] == "home"
    # A skill costing more than the budget is refused before it runs.
    status, body = await post_task(home, {"task": "x", "skill": "about", "budget": "0.10"})
    assert status == 402 and body["error"]["code"] == "budget_exhausted"


async def test_plugin_failures(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[
        ECHO, plugin_skill("explode", "tests.plugins.sample:explode"),
        plugin_skill("fail", "tests.plugins.sample:fail")])
    assert await fails(home, {"task": "x", "skill": "explode"}, "skill_error") == \
        "RuntimeError: boom"
    await fails(home, {"task": "x", "skill": "fail"}, "plugin_said_no")


async def test_unknown_skill_or_capability(swarm: Swarm) -> None:
    home = await swarm.start("home")
    message = await fails(home, {"task": "x", "skill": "teleport"}, "unknown_skill")
    assert "teleport" in message
    message = await fails(home, {"task": "x", "capabilities_needed": ["teleport"]},
                          "no_capable_skill")
    assert "teleport" in message or "provides" in message


async def test_exposure_reserved_names_and_tiers(swarm: Swarm) -> None:
    home = await swarm.start("home", callers={
        "operator": {}, "gold": {"tier": "gold"}, "root": {"tier": "admin"}}, skills=[
        ECHO,
        {"id": "hidden", "builtin": "echo", "capabilities": ["hidden"]},  # expose defaults off
        {"id": "admin.reset", "builtin": "echo", "capabilities": ["reset"], "expose": True},
        {"id": "butler.self", "builtin": "echo", "expose": True},
        {"id": "a2a.delegate", "builtin": "echo", "expose": True},
        {"id": "vault", "builtin": "echo", "capabilities": ["vault"], "expose": True,
         "tier": "gold"},
    ])

    async def card(who: str) -> list[str]:
        status, body = await call(home, "GET", "/v2/card", who=who)
        assert status == 200
        return [s["id"] for s in body["skills"]]

    assert await card("operator") == ["echo"]
    assert await card("gold") == ["echo", "vault"]
    assert await card("root") == ["echo", "vault"]  # reserved names: not even for admins

    for who in ("operator", "gold", "root"):
        for skill in ("hidden", "admin.reset", "butler.self", "a2a.delegate"):
            await fails(home, {"task": "x", "skill": skill}, "unknown_skill", who=who)
        await fails(home, {"task": "x", "capabilities_needed": ["reset"]}, "no_capable_skill",
                    who=who)
    status, body = await post_task(home, {"task": "x", "skill": "vault"}, who="operator")
    assert status == 403 and body["error"]["code"] == "forbidden"
    await fails(home, {"task": "x", "capabilities_needed": ["vault"]}, "no_capable_skill",
                who="operator")
    for who in ("gold", "root"):
        _, task = await post_task(home, {"task": "open", "skill": "vault"}, who=who)
        assert task["state"] == "completed" and task["output"] == "open"
        _, task = await post_task(home, {"task": "open", "capabilities_needed": ["vault"]},
                                  who=who)
        assert task["skill"] == "vault"


async def test_the_daemon_keeps_serving_under_bad_input(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[
        ECHO, plugin_skill("explode", "tests.plugins.sample:explode"),
        command_skill("flood", [PY, "-c", FLOOD], max_output_bytes=100)])
    bodies = [{"task": "x", "skill": "explode"}, {"task": "x", "skill": "flood"},
              {"task": "x", "skill": "nope"}] * 5
    results = await asyncio.gather(*(post_task(home, b) for b in bodies))
    assert {t["state"] for _, t in results} == {"failed"}
    assert sorted({t["error"]["code"] for _, t in results}) == [
        "output_too_large", "skill_error", "unknown_skill"]
    _, page = await call(home, "GET", "/v2/tasks?state=failed&limit=50")
    assert len(page["tasks"]) == 15
    status, body = await call(home, "GET", "/healthz")
    assert status == 200 and json.dumps(body)
