"""Task ids a caller chooses are scoped per caller: two callers using one id get a task
each, each sees only its own under that id on every binding, and no answer tells either
that the other exists. A real daemon; the second caller reads over /v2, its event
stream, JSON-RPC and its push configs."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing

from tests.a2a_support import ASK, rpc
from tests.support import ECHO, Swarm, call, post_task


async def test_one_id_two_callers_two_tasks_no_leak(swarm: Swarm) -> None:
    home = await swarm.start("home", callers={"operator": {}, "alice": {}}, skills=[ECHO, ASK],
                             configurations={"a2a": {"push_notifications": {
                                 "allow_loopback": True}}})
    status, theirs = await post_task(home, {"id": "job-1", "task": "operator's", "skill": "echo"})
    assert status == 200 and theirs["state"] == "completed"
    # Alice's task of the same id waits for her input, so it can be followed and answered.
    status, hers = await post_task(home, {"id": "job-1", "task": "alice's", "skill": "ask",
                                          "mode": "async"}, who="alice")
    assert status == 202 and hers["id"] == "job-1", hers
    assert hers["context_id"] != theirs["context_id"]

    status, got = await call(home, "GET", "/v2/tasks/job-1", who="alice")
    assert status == 200 and got["context_id"] == hers["context_id"]
    status, listed = await call(home, "GET", "/v2/tasks", who="alice")
    assert [t["id"] for t in listed["tasks"]] == ["job-1"]
    status, got = await call(home, "GET", "/v2/tasks/job-1")
    assert status == 200 and got == theirs  # the operator's is untouched

    status, body = await rpc(home, "GetTask", {"id": "job-1"}, who="alice")
    assert status == 200 and body["result"]["id"] == "job-1", body
    assert body["result"]["contextId"] == hers["context_id"]

    async with home.session.get(f"{home.url}/v2/tasks/job-1/events",
                                headers=home.headers("alice")) as resp:
        first = await anext(aiter(resp.content))
        while not first.startswith(b"data:"):
            first = await anext(aiter(resp.content))
    assert json.loads(first[5:])["id"] == "job-1"

    status, config = await rpc(home, "CreateTaskPushNotificationConfig", {
        "taskId": "job-1", "url": "http://127.0.0.1:9/hook", "token": "t"}, who="alice")
    assert status == 200 and "result" in config, config
    assert config["result"]["taskId"] == "job-1"
    status, configs = await rpc(home, "ListTaskPushNotificationConfigs", {"taskId": "job-1"})
    assert status == 200 and configs["result"].get("configs", []) == []  # not operator's

    status, answered = await call(home, "POST", "/v2/tasks/job-1/input", who="alice",
                                  body={"task": "Alice"})
    assert status == 200 and answered["state"] == "completed", answered
    assert answered["id"] == "job-1"
    status, got = await call(home, "GET", "/v2/tasks/job-1")
    assert got == theirs

    # Two rows: the first caller's under the plain id, the second's under a scoped one.
    with closing(sqlite3.connect(home.daemon.config.data_dir / "tasks.db")) as db:
        stored = sorted((owner, task_id) for task_id, owner in
                        db.execute("SELECT id, owner FROM tasks"))
    assert stored[0][0] == "alice" and stored[0][1].startswith("job-1~")
    assert stored[1] == ("operator", "job-1")
