"""The /v2 REST task routes against a real daemon: submit, get, cancel, list, events."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    ECHO,
    Instance,
    Swarm,
    call,
    command_skill,
    kill_quietly,
    plugin_skill,
    post_task,
    process_gone,
    wait_gone,
    wait_task,
    wait_until,
)

CALLERS: dict[str, dict[str, Any]] = {"operator": {}, "alice": {}, "root": {"tier": "admin"}}
SLEEPER = ("import os, sys, time\n"
           "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
           "time.sleep(30)\n")


async def start(swarm: Swarm, tmp_path: Path) -> Instance:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    return await swarm.start("home", callers=CALLERS, skills=[
        ECHO,
        plugin_skill("steps", "tests.plugins.sample:steps"),
        command_skill("sleep", [sys.executable, str(script), str(tmp_path / "sleeper.pid")]),
    ], extra={"server": {"shutdown_grace_seconds": 0.5}})


async def test_blocking_and_async_submit(swarm: Swarm, tmp_path: Path) -> None:
    home = await start(swarm, tmp_path)
    status, task = await post_task(home, {"task": "hi", "skill": "echo", "mode": "blocking"})
    assert status == 200 and task["state"] == "completed"
    status, task = await post_task(home, {"id": "job-1", "task": "later", "skill": "echo",
                                          "mode": "async", "context_id": "ctx-1"})
    assert status == 202
    assert task["id"] == "job-1" and task["context_id"] == "ctx-1"
    assert task["state"] in ("submitted", "working", "completed")
    done = await wait_task(home, "job-1")
    assert done["state"] == "completed" and done["output"] == "later"
    assert done["result"]["parts"] == [{"kind": "text", "text": "later"}]
    assert done["swarm"]["caller_chain"] == ["operator"] and len(done["swarm"]["trace_id"]) == 32


async def test_cancel_kills_the_command(swarm: Swarm, tmp_path: Path) -> None:
    home = await start(swarm, tmp_path)
    pid_file = tmp_path / "sleeper.pid"
    status, task = await post_task(home, {"task": "nap", "skill": "sleep", "mode": "async"})
    assert status == 202
    await wait_until(lambda: pid_file.exists() and pid_file.read_text(), what="the command's pid")
    pid = int(pid_file.read_text())
    try:
        assert not process_gone(pid)
        status, canceled = await call(home, "POST", f"/v2/tasks/{task['id']}/cancel")
        assert status == 200 and canceled["state"] == "canceled"
        await wait_gone(pid)
    finally:
        kill_quietly(pid)
    _, final = await call(home, "GET", f"/v2/tasks/{task['id']}")
    assert final["state"] == "canceled" and "error" not in final


async def test_cancel_refusals(swarm: Swarm, tmp_path: Path) -> None:
    home = await start(swarm, tmp_path)
    _, task = await post_task(home, {"task": "hi", "skill": "echo"})
    status, body = await call(home, "POST", f"/v2/tasks/{task['id']}/cancel")
    assert status == 409
    assert body["error"]["code"] == "task_not_cancelable"
    assert "completed" in body["error"]["message"]
    status, body = await call(home, "POST", "/v2/tasks/no-such-task/cancel")
    assert status == 404 and body["error"]["code"] == "task_not_found"
    status, body = await call(home, "GET", "/v2/tasks/no-such-task")
    assert status == 404 and body["error"]["code"] == "task_not_found"


async def test_list_filters_and_pages(swarm: Swarm, tmp_path: Path) -> None:
    home = await start(swarm, tmp_path)
    ids = []
    for i in range(7):
        _, task = await post_task(home, {"task": f"t{i}", "skill": "echo",
                                         "context_id": "even" if i % 2 == 0 else "odd"})
        ids.append(task["id"])
    _, waiting = await post_task(home, {"task": "x", "skill": "steps"})
    assert waiting["state"] == "input-required"

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = "?limit=3&state=completed" + (f"&cursor={cursor}" if cursor else "")
        status, page = await call(home, "GET", "/v2/tasks" + query)
        assert status == 200
        assert len(page["tasks"]) <= 3
        seen += [t["id"] for t in page["tasks"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == list(reversed(ids))  # newest first, each exactly once

    _, page = await call(home, "GET", "/v2/tasks?context_id=odd")
    assert [t["id"] for t in page["tasks"]] == [ids[5], ids[3], ids[1]]
    _, page = await call(home, "GET", "/v2/tasks?state=input-required")
    assert [t["id"] for t in page["tasks"]] == [waiting["id"]]
    _, page = await call(home, "GET", "/v2/tasks?state=input-required&context_id=odd")
    assert page == {"tasks": [], "next_cursor": None}


@pytest.mark.parametrize(("query", "needle"), [
    ("state=done", "state must be one of"),
    ("limit=0", "limit must be"),
    ("limit=abc", "limit must be"),
    ("limit=100000", "limit must be"),
    ("cursor=!!!", "invalid cursor"),
])
async def test_list_bad_query(swarm: Swarm, tmp_path: Path, query: str, needle: str) -> None:
    home = await start(swarm, tmp_path)
    status, body = await call(home, "GET", f"/v2/tasks?{query}")
    assert status == 400
    assert body["error"]["code"] == "invalid_params" and needle in body["error"]["message"]


async def test_events_stream_in_order(swarm: Swarm, tmp_path: Path) -> None:
    home = await start(swarm, tmp_path)
    client = home.client()
    _, task = await post_task(home, {"task": "work", "skill": "steps", "mode": "async"})
    await wait_task(home, task["id"], {"input-required"})
    received: list[tuple[str, Any]] = []
    subscribed = asyncio.Event()

    async def follow() -> None:
        async for name, data in client.events(task["id"]):
            received.append((name, data))
            subscribed.set()

    follower = asyncio.create_task(follow())
    await asyncio.wait_for(subscribed.wait(), 5)
    status, _ = await call(home, "POST", f"/v2/tasks/{task['id']}/input",
                           body={"task": "go", "mode": "async"})
    assert status == 200
    await asyncio.wait_for(follower, 10)

    seen = [(name, d["state"], d["status"]["message"]) if name == "status"
            else (name, d["artifact"]["name"]) for name, d in received]
    assert seen == [
        ("status", "input-required", "say go"),
        ("status", "working", "input received"),
        ("status", "working", "step 1"),
        ("artifact", "a1"),
        ("status", "working", "step 2"),
        ("status", "completed", ""),
    ]
    artifact = received[3][1]
    assert artifact["task_id"] == task["id"]
    assert artifact["artifact"]["parts"] == [{"kind": "text", "text": "first"},
                                             {"kind": "data", "data": {"n": 1}}]
    final = received[-1][1]
    assert final["output"] == "done after go"
    assert [a["name"] for a in final["result"]["artifacts"]] == ["a1"]


async def test_events_wire_format(swarm: Swarm, tmp_path: Path) -> None:
    home = await start(swarm, tmp_path)
    _, task = await post_task(home, {"task": "hi", "skill": "echo"})
    async with home.session.get(f"{home.url}/v2/tasks/{task['id']}/events",
                                headers=home.headers()) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream"
        raw = (await resp.read()).decode()
    # A finished task: one frame with its final state, then the stream ends.
    assert raw.startswith("event: status\ndata: {") and raw.endswith("}\n\n")
    assert raw.count("\n\n") == 1
    assert json.loads(raw.split("data: ", 1)[1])["state"] == "completed"
    async with home.session.get(f"{home.url}/v2/tasks/nope/events",
                                headers=home.headers()) as resp:
        assert resp.status == 404
        assert (await resp.json())["error"]["code"] == "task_not_found"


async def test_events_client_that_leaves_is_let_go(swarm: Swarm, tmp_path: Path) -> None:
    home = await start(swarm, tmp_path)
    _, task = await post_task(home, {"task": "x", "skill": "steps"})
    assert task["state"] == "input-required"
    hub = home.daemon.engine.hub
    for _ in range(3):
        async with home.session.get(f"{home.url}/v2/tasks/{task['id']}/events",
                                    headers=home.headers()) as resp:
            assert (await resp.content.readline()) == b"event: status\n"
            assert hub.subscribers(task["id"]) >= 1
        # Leaving the block before the stream ended closed the connection.
    # The daemon notices each departed client (it checks once a second) and unsubscribes.
    await wait_until(lambda: not hub.subscribers(task["id"]), 5)
    _, canceled = await call(home, "POST", f"/v2/tasks/{task['id']}/cancel")
    assert canceled["state"] == "canceled"


async def test_callers_see_only_their_own_tasks(swarm: Swarm, tmp_path: Path) -> None:
    home = await start(swarm, tmp_path)
    _, mine = await post_task(home, {"task": "secret", "skill": "echo"}, who="operator")
    _, theirs = await post_task(home, {"task": "hers", "skill": "echo"}, who="alice")
    path = f"/v2/tasks/{mine['id']}"
    for method, suffix in (("GET", ""), ("POST", "/cancel"), ("GET", "/events")):
        async with home.session.request(method, home.url + path + suffix,
                                        headers=home.headers("alice")) as resp:
            assert resp.status == 404, (method, suffix)
            assert (await resp.json())["error"]["code"] == "task_not_found"
    status, body = await call(home, "POST", path + "/input", who="alice", body={"task": "x"})
    assert status == 404
    _, page = await call(home, "GET", "/v2/tasks", who="alice")
    assert [t["id"] for t in page["tasks"]] == [theirs["id"]]
    # An admin-tier caller sees everyone's tasks.
    status, body = await call(home, "GET", path, who="root")
    assert status == 200 and body["output"] == "secret"
    _, page = await call(home, "GET", "/v2/tasks", who="root")
    assert {t["id"] for t in page["tasks"]} == {mine["id"], theirs["id"]}


@pytest.mark.parametrize(("body", "needle"), [
    ({"task": "x", "colour": "red"}, "unknown field(s): colour"),
    ({"task": 42}, "task must be a string"),
    ({"task": "x", "mode": "eventually"}, "mode must be 'blocking' or 'async'"),
    ({"task": "x", "input": [1, 2]}, "input must be a JSON object"),
    ({"task": "x", "capabilities_needed": "echo"}, "capabilities_needed must be a list"),
    ({"task": "x", "timeout_seconds": "soon"}, "timeout_seconds must be a number"),
    ({"task": "x", "timeout_seconds": 0}, "timeout_seconds must be a number"),
    ({"task": "x", "id": "no spaces please"}, "id must be"),
    ({"task": "x", "parts": [{"nothing": 1}]}, "parts[0] needs text"),
    ({}, "a task needs task (text), input or parts"),
    ([1, 2], "request body must be a JSON object"),
])
async def test_malformed_bodies(swarm: Swarm, tmp_path: Path, body: Any, needle: str) -> None:
    home = await start(swarm, tmp_path)
    async with home.session.post(f"{home.url}/v2/tasks", json=body,
                                 headers=home.headers()) as resp:
        assert resp.status == 400
        error = (await resp.json())["error"]
    assert error["code"] == "invalid_request"
    assert needle in error["message"]
    # The daemon keeps serving.
    status, task = await post_task(home, {"task": "still here", "skill": "echo"})
    assert status == 200 and task["output"] == "still here"


async def test_malformed_json_and_budget(swarm: Swarm, tmp_path: Path) -> None:
    home = await start(swarm, tmp_path)
    async with home.session.post(f"{home.url}/v2/tasks", data=b"{not json",
                                 headers={**home.headers(),
                                          "Content-Type": "application/json"}) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"]["code"] == "malformed_json"
    status, body = await post_task(home, {"task": "x", "budget": "lots"})
    assert status == 400 and body["error"]["code"] == "invalid_envelope"


async def test_numbers_in_input_stay_numbers(swarm: Swarm) -> None:
    # Regression: fractions were read as exact decimals and came back as strings.
    home = await swarm.start("home")
    status, task = await post_task(home, {"skill": "echo", "input": {"x": 0.5, "n": [1, 2.25]}})
    assert status == 200
    assert task["result"]["parts"][0]["data"] == {"x": 0.5, "n": [1, 2.25]}
