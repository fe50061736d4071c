"""A delegation survives a restart of its delegating daemon (issue 34, requirement 4).

home runs as a real child process (``butler serve``) and delegates to lab, an in-process
Butler whose skill asks a question, then works until the test opens a gate. home gets
SIGKILL while lab's task waits and again while it works; each time the restarted home
re-attaches to lab's task (its id, context and binding were stored with home's task)
and ends with lab's outcome. A lab that no longer knows the task fails it with
``peer_task_lost``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.delegation_support import free_port
from tests.sdk_agent import sdk_agent
from tests.support import (
    Instance,
    ServeProcess,
    config_dict,
    new_pair,
    plugin_skill,
    start_instance,
    wait_until,
    write_config,
)

COUNT = plugin_skill("count", "tests.plugins.questions:ask_then_work",
                     capabilities=["lab.count"])


class Pair:
    """lab in process, home as a child process delegating to it (or, ``home_to``, to
    another agent)."""

    def __init__(self, tmp: Path, http: aiohttp.ClientSession) -> None:
        self.tmp, self.http = tmp, http
        self.lab_port = free_port()
        self.lab_cfg, self.lab_tokens = config_dict(
            tmp, "lab", skills=[COUNT],
            callers={"operator": {"bound": False, "tier": "admin"}, "home": {}})
        self.lab_cfg["configurations"]["a2a"]["port"] = self.lab_port
        self.home_to(f"http://127.0.0.1:{self.lab_port}", self.lab_tokens["home"],
                     name="lab", capabilities=["lab.count"])
        self.lab: Instance | None = None
        self.home: ServeProcess | None = None

    def home_to(self, url: str, token: str, **peer: Any) -> None:
        """home's config: its one peer at ``url``."""
        token_file = self.tmp / "home-to-peer.token"
        token_file.write_text(token)
        cfg, self.home_tokens = config_dict(self.tmp, "home", skills=[], peers=[{
            "url": url, "token_file": str(token_file), **peer}])
        cfg["configurations"]["a2a"]["port"] = free_port()
        self.home_config = write_config(self.tmp, "home", cfg)

    async def start_lab(self, data_dir: str = "lab") -> Instance:
        self.lab_cfg["data_dir"] = str(self.tmp / data_dir)
        self.lab = await start_instance(self.tmp, self.http, self.lab_cfg, self.lab_tokens)
        return self.lab

    async def start_home(self) -> ServeProcess:
        self.home = await ServeProcess.start(self.home_config, self.tmp / "home.log")
        return self.home

    async def home_call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        assert self.home is not None
        headers = {"Authorization": f"Bearer {self.home_tokens['operator']}"}
        async with self.http.request(method, self.home.url + path, json=body,
                                     headers=headers) as resp:
            data: dict[str, Any] = await resp.json()
            return data

    async def home_task(self, task_id: str) -> dict[str, Any]:
        return await self.home_call("GET", f"/v2/tasks/{task_id}")

    async def lab_tasks(self) -> list[dict[str, Any]]:
        assert self.lab is not None
        listing = await self.lab.client().list_tasks()
        tasks: list[dict[str, Any]] = listing["tasks"]
        return tasks

    async def close(self) -> None:
        if self.home is not None:
            await self.home.stop()
        if self.lab is not None:
            await self.lab.daemon.stop()


@pytest.fixture
async def pair(tmp_path: Path, http: aiohttp.ClientSession) -> Any:
    made = Pair(tmp_path, http)
    try:
        yield made
    finally:
        await made.close()


async def until_state(pair: Pair, task_id: str, state: str, *,
                      history: int = 0) -> dict[str, Any]:
    """home's task once in ``state`` with at least ``history`` entries."""
    async def reached() -> dict[str, Any] | None:
        task = await pair.home_task(task_id)
        return task if task["state"] == state and len(task["history"]) >= history else None

    try:  # a child daemon's start takes seconds on a busy machine
        found: dict[str, Any] = await wait_until(reached, timeout=30, what=f"home task {state}")
    except AssertionError:
        raise AssertionError(f"{await pair.home_task(task_id)}\n"
                             f"{(pair.tmp / 'home.log').read_text()[-3000:]}") from None
    return found


async def test_home_killed_twice_reattaches_and_ends_with_labs_outcome(pair: Pair) -> None:
    gate = pair.tmp / "gate"
    await pair.start_lab()
    await pair.start_home()
    submitted = await pair.home_call("POST", "/v2/tasks", {
        "task": "count", "capabilities_needed": ["lab.count"], "mode": "async",
        "input": {"gate": str(gate)}})
    task_id = submitted["id"]
    asked = await until_state(pair, task_id, "input-required")
    assert asked["status"] == {"state": "input-required", "message": "how many?",
                               "at": asked["updated_at"], "asked_by": "lab"}

    # Killed while lab's task waits on its caller: home asks its caller again.
    assert pair.home is not None
    await pair.home.kill9()
    await pair.start_home()
    again = await until_state(pair, task_id, "input-required", history=len(asked["history"]) + 2)
    assert [h["message"] for h in again["history"][-2:]] == [
        "following lab's task again after a restart", "how many?"]
    working = await pair.home_call("POST", f"/v2/tasks/{task_id}/input",
                                   {"task": "three", "mode": "async"})
    assert working["state"] == "working", working
    (lab_task,) = await pair.lab_tasks()
    await wait_until(lambda: _labs_state(pair, "working", "counting to three"),
                     what="lab counting")

    # Killed while lab's task works: the restarted home follows it to its end.
    await pair.home.kill9()
    await pair.start_home()
    gate.touch()
    done = await until_state(pair, task_id, "completed")
    assert done["output"] == "counted to three"
    assert "interrupted_by_restart" not in str(done)
    assert [t["id"] for t in await pair.lab_tasks()] == [lab_task["id"]]  # never sent twice
    assert (await pair.lab_tasks())[0]["state"] == "completed"


async def _labs_state(pair: Pair, state: str, message: str) -> bool:
    (task,) = await pair.lab_tasks()
    return bool(task["state"] == state and task["status"]["message"] == message)


async def test_a_peer_that_no_longer_knows_the_task_fails_it_clearly(pair: Pair) -> None:
    lab = await pair.start_lab()
    await pair.start_home()
    submitted = await pair.home_call("POST", "/v2/tasks", {
        "task": "count", "capabilities_needed": ["lab.count"], "mode": "async",
        "input": {"gate": str(pair.tmp / "never")}})
    await until_state(pair, submitted["id"], "input-required")
    assert pair.home is not None
    await pair.home.kill9()
    await lab.daemon.stop()
    # Same address and key (home has it pinned), none of its tasks.
    (pair.tmp / "lab-anew").mkdir()
    shutil.copy(pair.tmp / "lab" / "identity_key.json", pair.tmp / "lab-anew")
    await pair.start_lab("lab-anew")
    await pair.start_home()
    failed = await until_state(pair, submitted["id"], "failed")
    assert failed["error"]["code"] == "peer_task_lost", failed["error"]
    assert "lab no longer knows task" in failed["error"]["message"]


async def test_a_delegation_to_an_sdk_agent_reattaches_over_its_binding(pair: Pair) -> None:
    """The official SDK's agent (JSON-RPC 1.0, no stream) asks; home is killed while the
    question waits; the restarted home reads the peer's task with GetTask, asks its caller
    again, and the answer reaches the peer's task."""
    token, _ = new_pair()
    async with sdk_agent(token, reply="ask", streaming=False) as agent:
        pair.home_to(agent.url, token, name="shouter", protocol="a2a", capabilities=["shout"])
        await pair.start_home()
        submitted = await pair.home_call("POST", "/v2/tasks", {
            "task": "hello", "capabilities_needed": ["shout"], "mode": "async"})
        asked = await until_state(pair, submitted["id"], "input-required")
        assert asked["status"]["message"] == "how loud?"
        assert pair.home is not None
        await pair.home.kill9()
        await pair.start_home()
        again = await until_state(pair, submitted["id"], "input-required",
                                  history=len(asked["history"]) + 2)
        assert again["status"]["asked_by"] == "shouter"
        await pair.home_call("POST", f"/v2/tasks/{submitted['id']}/input", {"task": "back"})
        done = await until_state(pair, submitted["id"], "completed")
        assert done["output"] == "BACK"
        first, answer = agent.seen.messages[0], agent.seen.messages[1]
        assert len(agent.seen.messages) == 2 and answer.task_id
        assert answer.context_id == first.context_id
