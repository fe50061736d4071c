"""``butler send`` and ``butler tasks list|get|cancel|watch`` as real subprocesses."""

from __future__ import annotations

import asyncio
import sys

from tests.support import (
    REPO,
    Instance,
    Swarm,
    call,
    child_env,
    post_task,
    run_cli,
    sample_skills,
    wait_task,
)


async def start(swarm: Swarm) -> Instance:
    return await swarm.start("home", skills=sample_skills())


async def test_send_shows_progress_and_result(swarm: Swarm) -> None:
    home = await start(swarm)
    token = home.tokens["operator"]
    code, out, err = await run_cli("send", home.url, "hello there", "--capability", "echo",
                                   token=token)
    assert code == 0, err
    assert "task " in err and "completed" in err  # progress goes to stderr
    assert "completed  (skill echo)" in out
    assert "result: hello there" in out
    assert "budget: start 5.00 USD" in out

    code, out, err = await run_cli("send", home.url, "x", "--skill", "fail", token=token)
    assert code == 1
    assert "error: plugin_said_no: the plugin failed on purpose" in out

    code, out, _ = await run_cli("send", home.url, "later", "--capability", "echo", "--async",
                                 token=token)
    assert code == 0
    task = await wait_task(home, out.strip())
    assert task["output"] == "later"


async def test_send_refusals_say_why(swarm: Swarm) -> None:
    home = await start(swarm)
    code, _, err = await run_cli("send", home.url, "x", "--capability", "echo")
    assert code != 0 and "set BUTLER_TOKEN" in err
    code, _, err = await run_cli("send", home.url, "x", token="wrong")
    assert code == 1 and "unauthenticated" in err
    code, _, err = await run_cli("send", home.url, "x", "--input", "{not json",
                                 token=home.tokens["operator"])
    assert code != 0 and "--input is not JSON" in err


async def test_tasks_list_get_cancel(swarm: Swarm) -> None:
    home = await start(swarm)
    token = home.tokens["operator"]
    _, done = await post_task(home, {"task": "first", "skill": "echo"})
    _, waiting = await post_task(home, {"task": "second", "skill": "steps"})

    code, out, err = await run_cli("tasks", "list", home.url, token=token)
    assert code == 0, err
    header, *lines = out.splitlines()
    assert header.split() == ["ID", "STATE", "SKILL", "UPDATED", "SPENT"]
    assert [line.split()[:2] for line in lines] == [[waiting["id"], "input-required"],
                                                    [done["id"], "completed"]]
    code, out, _ = await run_cli("tasks", "list", home.url, "--state", "completed",
                                 token=token)
    assert [line.split()[0] for line in out.splitlines()[1:]] == [done["id"]]

    code, out, _ = await run_cli("tasks", "get", home.url, done["id"], token=token)
    assert code == 0
    assert f"task {done['id']}: completed" in out and "result: first" in out

    code, out, _ = await run_cli("tasks", "cancel", home.url, waiting["id"], token=token)
    assert code == 0 and out.strip() == f"task {waiting['id']}: canceled"
    code, _, err = await run_cli("tasks", "cancel", home.url, done["id"], token=token)
    assert code == 1 and "task_not_cancelable" in err
    code, _, err = await run_cli("tasks", "get", home.url, "missing", token=token)
    assert code == 1 and "task_not_found" in err


async def test_tasks_watch_follows_to_the_end(swarm: Swarm) -> None:
    home = await start(swarm)
    _, task = await post_task(home, {"task": "go", "skill": "steps"})
    assert task["state"] == "input-required"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "butler", "tasks", "watch", home.url, task["id"],
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO,
        env=child_env(BUTLER_TOKEN=home.tokens["operator"]))
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(20):
            first = (await proc.stdout.readline()).decode()
            assert first.split(" ", 1)[1] == "input-required: say go\n"
            status, _ = await call(home, "POST", f"/v2/tasks/{task['id']}/input",
                                   body={"task": "now", "mode": "async"})
            assert status == 200
            rest, err = await proc.communicate()
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err
    lines = [line.split(" ", 1)[1] if not line.startswith("artifact") else line[:12]
             for line in rest.decode().splitlines()]
    assert lines == ["working: input received", "working: step 1", "artifact: {\"",
                     "working: step 2", "completed: "]


async def test_send_stops_when_asked_for_input_and_answer_resumes(swarm: Swarm) -> None:
    home = await start(swarm)
    token = home.tokens["operator"]
    code, out, err = await run_cli("send", home.url, "x", "--skill", "steps", token=token)
    assert code == 1  # not completed (yet)
    assert "input-required: say go" in err and "butler tasks answer" in err
    task_id = out.split()[1].rstrip(":")
    assert f"task {task_id}: input-required" in out
    code, out, err = await run_cli("tasks", "answer", home.url, task_id, "go", token=token)
    assert code == 0, err
    assert f"task {task_id}: completed" in out and "result: done after go" in out


async def test_tasks_list_pages_and_context(swarm: Swarm) -> None:
    home = await start(swarm)
    token = home.tokens["operator"]
    ids = [(await post_task(home, {"task": str(i), "skill": "echo",
                                   "context_id": f"c{i % 2}"}))[1]["id"] for i in range(5)]
    code, out, err = await run_cli("tasks", "list", home.url, "--limit", "3", token=token)
    assert code == 0 and len(out.splitlines()) == 1 + 3  # the header, then the tasks
    cursor = err.split("--cursor ", 1)[1].strip()
    code, out, err = await run_cli("tasks", "list", home.url, "--limit", "3",
                                   "--cursor", cursor, token=token)
    assert [line.split()[0] for line in out.splitlines()[1:]] == [ids[1], ids[0]]
    assert "--cursor" not in err
    code, out, _ = await run_cli("tasks", "list", home.url, "--context", "c1", token=token)
    assert [line.split()[0] for line in out.splitlines()[1:]] == [ids[3], ids[1]]
