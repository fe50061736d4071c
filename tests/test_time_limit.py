"""A run's time limit (``asyncio.timeout`` in ``TaskRun._outcome``): past it, the skill is
cancelled where it waits and the task fails with ``task_timeout``; a cancel from outside
stays a cancel."""

from __future__ import annotations

from tests.support import ECHO, Instance, Swarm, call, plugin_skill, post_task, wait_task
from tests.test_tasks_lifecycle import finished_run


async def start(swarm: Swarm) -> Instance:
    return await swarm.start("home", skills=[ECHO,
                                             plugin_skill("hang", "tests.plugins.sample:hang")])


async def test_past_its_limit_a_waiting_skill_is_cancelled_and_the_task_fails(
        swarm: Swarm) -> None:
    home = await start(swarm)
    status, task = await post_task(home, {"task": "x", "skill": "hang", "timeout_seconds": 1})
    assert status == 200 and task["state"] == "failed", task
    assert task["error"] == {"code": "task_timeout",
                             "message": "task did not finish within 1s"}, task["error"]
    # The skill was cancelled where it waited (its ``finally`` reported it) before the end.
    assert [(h["state"], h["message"]) for h in task["history"]][-3:] == [
        ("working", "waiting"), ("working", "cancelled"),
        ("failed", "task did not finish within 1s")]
    await finished_run(task["id"])
    # The daemon goes on serving, and a run that never waits is not limited by anything.
    status, echoed = await post_task(home, {"task": "alive?", "skill": "echo",
                                            "timeout_seconds": 1})
    assert status == 200 and echoed["output"] == "alive?"


async def test_a_cancel_before_the_limit_is_a_cancel_not_a_timeout(swarm: Swarm) -> None:
    home = await start(swarm)
    status, task = await post_task(home, {"task": "x", "skill": "hang", "mode": "async",
                                          "timeout_seconds": 60})
    assert status == 202
    await wait_task(home, task["id"], {"working"}, message="waiting")
    status, canceled = await call(home, "POST", f"/v2/tasks/{task['id']}/cancel")
    assert status == 200 and canceled["state"] == "canceled"
    await finished_run(task["id"])
    final = await wait_task(home, task["id"])
    assert final["state"] == "canceled" and final.get("error") is None, final
