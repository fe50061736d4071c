"""A delegation tree's workspace is keyed by its tree id and the authenticated caller,
never by what a caller alone chooses: sibling tasks of one tree share it on the peer,
and a caller who sends another's tree id or reuses another's trace id sees nothing.
Real daemons on loopback: home delegates to office over each protocol."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

import aiohttp
import pytest

from tests.delegation_support import Mesh

PLUGINS = "tests.plugins.fanout"


def build(mesh: Mesh, protocol: str) -> None:
    mesh.agent("office", skills=[
        {"id": "note", "python": f"{PLUGINS}:note", "capabilities": ["note.put", "note.get"],
         "expose": True},
    ], callers={"mallory": {"bound": False}})
    mesh.agent("home", skills=[
        {"id": "pair", "python": f"{PLUGINS}:put_then_get", "expose": True},
        {"id": "peek", "python": f"{PLUGINS}:get_only", "expose": True},
    ])
    mesh.link("home", "office", ["note.put", "note.get"], protocol=protocol)


async def post(http: aiohttp.ClientSession, url: str, token: str, body: dict[str, Any],
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    hdrs = {"Authorization": f"Bearer {token}", **(headers or {})}
    async with http.post(f"{url}/v2/tasks", json=body, headers=hdrs) as resp:
        return resp.status, await resp.json()


def data(task: dict[str, Any]) -> Any:
    return task["result"]["parts"][0]["data"]


def trace(task: dict[str, Any]) -> str:
    trace_id: str = task["swarm"]["trace_id"]
    return trace_id


def trees(mesh: Mesh, agent: str) -> list[str]:
    path = mesh.instances[agent].daemon.config.data_dir / "workspace.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        return [t for (t,) in db.execute("SELECT DISTINCT tree FROM workspace")]


@pytest.mark.parametrize("protocol", ["butler", "a2a"])
async def test_sibling_tasks_of_one_tree_share_the_peers_workspace(
        mesh: Mesh, http: aiohttp.ClientSession, protocol: str) -> None:
    build(mesh, protocol)
    agents = await mesh.start()
    home, office = agents["home"], agents["office"]
    status, task = await post(http, home.url, home.tokens["operator"],
                              {"task": "the printer PIN is 4711", "skill": "pair"})
    assert status == 200 and task["state"] == "completed", task.get("error")
    assert data(task) == {"note": "the printer PIN is 4711"}
    # One tree on office, keyed by the tree id home gave it and office's caller, home.
    [key] = trees(mesh, "office")
    tree_id, caller = key.split("/")
    assert len(tree_id) == 32 and caller == "home"
    assert tree_id != trace(task)

    # Mallory learned the tree id and the trace id: on office, she reads her own, empty
    # workspace, whether she sends them as headers or in the body.
    for headers, body in (({"X-Swarm-Tree-ID": tree_id, "X-Swarm-Trace-ID": trace(task)},
                           {}), ({}, {"tree_id": tree_id, "trace_id": trace(task)})):
        status, read = await post(http, office.url, office.tokens["mallory"],
                                  {"task": "read the note", "skill": "note", **body}, headers)
        assert status == 200 and data(read) == {"note": None}, read


async def test_reusing_a_trace_id_does_not_reach_anothers_tree(
        mesh: Mesh, http: aiohttp.ClientSession) -> None:
    build(mesh, "butler")
    agents = await mesh.start()
    home = agents["home"]
    status, first = await post(http, home.url, home.tokens["operator"],
                               {"task": "secret", "skill": "pair"})
    assert status == 200 and data(first) == {"note": "secret"}, first
    # A later task on the same trace (any caller may name a trace) is a new tree: the
    # note of the first is out of its reach on office.
    status, second = await post(http, home.url, home.tokens["operator"],
                                {"task": "peek", "skill": "peek"},
                                {"X-Swarm-Trace-ID": trace(first)})
    assert status == 200 and trace(second) == trace(first), second
    assert data(second) == {"note": None}, second
    assert len(trees(mesh, "office")) == 1  # peek wrote nothing, and found nothing


@pytest.mark.parametrize(("headers", "body"), [
    ({"X-Swarm-Tree-ID": "not-hex"}, {}),
    ({}, {"tree_id": "A" * 32}),
    ({}, {"tree_id": 7}),
    ({"X-Swarm-Tree-ID": "a" * 32}, {"tree_id": "b" * 32}),
])
async def test_a_bad_tree_id_is_refused(mesh: Mesh, http: aiohttp.ClientSession,
                                        headers: dict[str, str], body: dict[str, Any]) -> None:
    build(mesh, "butler")
    office = (await mesh.start())["office"]
    status, answer = await post(http, office.url, office.tokens["mallory"],
                                {"task": "read the note", "skill": "note", **body}, headers)
    assert status == 400 and answer["error"]["code"] == "invalid_envelope", answer
