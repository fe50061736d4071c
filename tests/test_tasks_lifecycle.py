"""The task state machine against a real daemon: every transition a skill can cause."""

from __future__ import annotations

import asyncio
import sys

from butler.engine.transitions import Started
from internal.protocol.a2a.model import TaskState
from tests.support import (
    ECHO,
    Instance,
    Swarm,
    call,
    command_skill,
    plugin_skill,
    post_task,
    wait_task,
)

SKILLS = [
    ECHO,
    plugin_skill("ask", "tests.plugins.sample:ask_name"),
    plugin_skill("refuse", "tests.plugins.sample:refuse"),
    plugin_skill("fail", "tests.plugins.sample:fail"),
    plugin_skill("explode", "tests.plugins.sample:explode"),
    plugin_skill("stubborn", "tests.plugins.sample:stubborn"),
    command_skill("grumpy", [sys.executable, "-c",
                             "import sys; sys.stderr.write('x' * 5000 + ' disk is full'); "
                             "sys.exit(3)"]),
]


async def start(swarm: Swarm) -> Instance:
    return await swarm.start("home", skills=SKILLS)


async def finished_run(task_id: str) -> None:
    """Wait until the engine's run of ``task_id`` (an asyncio task) has returned."""
    runs = [t for t in asyncio.all_tasks() if t.get_name() == f"task-{task_id}"]
    await asyncio.wait_for(asyncio.gather(*runs, return_exceptions=True), 5)


def states(task: dict[str, object]) -> list[str]:
    history = task["history"]
    assert isinstance(history, list)
    return [h["state"] for h in history]


def test_the_eight_states() -> None:
    assert [s.value for s in TaskState] == [
        "submitted", "working", "input-required", "auth-required",
        "completed", "failed", "canceled", "rejected",
    ]
    assert {s.value for s in TaskState if s.terminal} == {
        "completed", "failed", "canceled", "rejected"}
    assert {s.value for s in TaskState if s.interrupted} == {"input-required", "auth-required"}


async def test_completed(swarm: Swarm) -> None:
    home = await start(swarm)
    status, task = await post_task(home, {"task": "hi", "skill": "echo"})
    assert status == 200
    assert task["state"] == "completed" and task["output"] == "hi"
    assert states(task) == ["submitted", "working", "completed"]
    assert "error" not in task


async def test_failed_by_skill_failed(swarm: Swarm) -> None:
    home = await start(swarm)
    _, task = await post_task(home, {"task": "x", "skill": "fail"})
    assert task["state"] == "failed"
    assert task["error"] == {"code": "plugin_said_no", "message": "the plugin failed on purpose"}
    assert task["status"]["message"] == "the plugin failed on purpose"


async def test_failed_by_plain_exception(swarm: Swarm) -> None:
    home = await start(swarm)
    _, task = await post_task(home, {"task": "x", "skill": "explode"})
    assert task["state"] == "failed"
    assert task["error"] == {"code": "skill_error", "message": "RuntimeError: boom"}


async def test_failed_by_command_exit_code(swarm: Swarm) -> None:
    home = await start(swarm)
    _, task = await post_task(home, {"task": "x", "skill": "grumpy"})
    assert task["state"] == "failed"
    assert task["error"]["code"] == "command_failed"
    message = task["error"]["message"]
    assert "exited with 3" in message and message.endswith("disk is full")
    assert len(message) < 2200  # only the tail of stderr


async def test_rejected(swarm: Swarm) -> None:
    home = await start(swarm)
    _, task = await post_task(home, {"task": "mow the lawn", "skill": "refuse"})
    assert task["state"] == "rejected"
    assert task["error"]["code"] == "rejected"
    assert task["status"]["message"] == "will not do 'mow the lawn'"
    assert states(task) == ["submitted", "working", "rejected"]


async def test_canceled_and_a_late_result_is_discarded(swarm: Swarm) -> None:
    home = await start(swarm)
    status, task = await post_task(home, {"task": "x", "skill": "stubborn", "mode": "async"})
    assert status == 202
    await wait_task(home, task["id"], {"working"}, message="waiting")
    status, canceled = await call(home, "POST", f"/v2/tasks/{task['id']}/cancel")
    assert status == 200 and canceled["state"] == "canceled"
    assert canceled["status"]["message"] == "canceled by operator"
    # The plugin swallowed the cancellation and returned a result; the task stays canceled
    # and neither that result nor the artifact it emitted afterwards is kept.
    await finished_run(task["id"])
    final = await wait_task(home, task["id"])
    assert final["state"] == "canceled"
    assert final["result"] == {"parts": [], "artifacts": []}
    assert states(final)[-1] == "canceled"


async def test_input_required_then_resumed(swarm: Swarm) -> None:
    home = await start(swarm)
    # A blocking call returns as soon as the task waits for its caller.
    status, task = await post_task(home, {"task": "greet me", "skill": "ask"})
    assert status == 200
    assert task["state"] == "input-required"
    assert task["status"]["message"] == "what is your name?"
    status, done = await call(home, "POST", f"/v2/tasks/{task['id']}/input",
                              body={"task": "Ada"})
    assert status == 200
    assert done["state"] == "completed" and done["output"] == "hello Ada"
    assert states(done) == ["submitted", "working", "input-required", "working", "completed"]


async def test_resumed_with_structured_input_async(swarm: Swarm) -> None:
    home = await start(swarm)
    _, task = await post_task(home, {"task": "greet me", "skill": "ask", "mode": "async"})
    await wait_task(home, task["id"], {"input-required"})
    status, resumed = await call(home, "POST", f"/v2/tasks/{task['id']}/input",
                                 body={"input": {"name": "Grace"}, "mode": "async"})
    assert status == 200 and resumed["state"] in ("working", "completed")
    done = await wait_task(home, task["id"])
    assert done["output"] == "hello Grace"


async def test_input_only_while_waiting(swarm: Swarm) -> None:
    home = await start(swarm)
    _, task = await post_task(home, {"task": "hi", "skill": "echo"})
    status, body = await call(home, "POST", f"/v2/tasks/{task['id']}/input",
                              body={"task": "more"})
    assert status == 409 and body["error"]["code"] == "task_terminal"
    status, body = await call(home, "POST", "/v2/tasks/nope/input", body={"task": "more"})
    assert status == 404 and body["error"]["code"] == "task_not_found"


async def test_cancel_while_waiting_for_input(swarm: Swarm) -> None:
    home = await start(swarm)
    _, task = await post_task(home, {"task": "greet me", "skill": "ask"})
    assert task["state"] == "input-required"
    status, canceled = await call(home, "POST", f"/v2/tasks/{task['id']}/cancel")
    assert status == 200 and canceled["state"] == "canceled"
    status, body = await call(home, "POST", f"/v2/tasks/{task['id']}/input",
                              body={"task": "Ada"})
    assert status == 409 and body["error"]["code"] == "task_terminal"


async def test_terminal_states_never_change(swarm: Swarm) -> None:
    home = await start(swarm)
    ends = {}
    for skill in ("echo", "fail", "refuse"):
        _, task = await post_task(home, {"task": "x", "skill": skill})
        ends[skill] = task
    _, asked = await post_task(home, {"task": "x", "skill": "ask"})
    await call(home, "POST", f"/v2/tasks/{asked['id']}/cancel")
    _, ends["ask"] = await call(home, "GET", f"/v2/tasks/{asked['id']}")
    for task in ends.values():
        status, body = await call(home, "POST", f"/v2/tasks/{task['id']}/cancel")
        assert status == 409 and body["error"]["code"] == "task_not_cancelable"
        # The engine itself refuses to move a terminal task.
        assert await home.daemon.engine.apply(task["id"], Started("again")) is None
        _, again = await call(home, "GET", f"/v2/tasks/{task['id']}")
        assert again == task
