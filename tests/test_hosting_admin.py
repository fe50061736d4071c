"""Hosted agents added and removed at run time (the admin API and ``butler agents``), kept
across restarts, and the commands that read a hosted agent's data folder."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from butler.config import load_config
from butler.daemon import Daemon
from internal.protocol.a2a.model import SetupError
from tests.a2a_support import WAIT
from tests.hosting_support import get_json, hosted, hosted_entry
from tests.support import Swarm, config_dict, post_task, run_cli, wait_task, write_config


async def test_agents_added_and_removed_at_run_time_and_kept(swarm: Swarm) -> None:
    top = await swarm.start("top", callers={"operator": {}, "root": {"tier": "admin"}})
    http = top.session
    admin = f"{top.url}/v2/admin/agents"
    gamma, gamma_tokens = hosted_entry("gamma")
    async with http.post(admin, json=gamma, headers=top.headers()) as resp:
        assert resp.status == 403  # not an admin
    async with http.post(admin, json=gamma, headers=top.headers("root")) as resp:
        assert resp.status == 201, await resp.text()
        assert (await resp.json())["url"] == f"{top.url}/gamma"
    async with http.post(admin, json=gamma, headers=top.headers("root")) as resp:
        assert resp.status == 409 and (await resp.json())["error"]["code"] == "agent_exists"
    for bad in ({**gamma, "id": "v2"}, {**gamma, "id": "Not A Slug"}, {"id": "x"}, [1]):
        async with http.post(admin, json=bad, headers=top.headers("root")) as resp:
            assert resp.status == 400, bad
    # Unless the config allows it, an admin token cannot make the daemon run code, read a
    # file or a variable, or call a URL of its choosing.
    token_file = {"name": "p", "url": "http://127.0.0.1:9/", "token_file": "/etc/hostname"}
    for local, where in (({"skills": [{"id": "c", "command": ["id"]}]}, "skills[0]"),
                         ({"skills": [{"id": "p", "python": "os:system"}]}, "skills[0]"),
                         ({"skills": [{"id": "m", "mcp": {"url": "http://x/"}}]}, "skills[0]"),
                         ({"peers": [token_file]}, "peers"),
                         ({"registry": {"url": "http://169.254.169.254/"}}, "registry"),
                         ({"skills": [{"id": "p", "builtin": "planner"}]}, "has no planner"),
                         ({"description": "${HOME}"}, "description")):
        async with http.post(admin, json={**gamma, "id": "local", **local},
                             headers=top.headers("root")) as resp:
            body = await resp.json()
            assert resp.status == 400 and where in body["error"]["message"], (local, body)
    task = {"task": "hi", "skill": "echo"}
    gamma_auth = {"Authorization": f"Bearer {gamma_tokens['operator']}"}
    async with http.post(f"{top.url}/gamma/v2/tasks", json=task, headers=gamma_auth) as resp:
        assert resp.status == 200 and (await resp.json())["state"] == "completed"

    # Kept across a restart of the daemon, from its data folder.
    await swarm.stop(top)
    again = Daemon(load_config(top.config_path))
    await again.start()
    try:
        async with http.post(f"{again.url}/gamma/v2/tasks", json=task,
                             headers=gamma_auth) as resp:
            assert resp.status == 200
        status, listed = await get_json(http, f"{again.url}/v2/admin/agents",
                                        top.tokens["root"])
        assert status == 200 and [a["id"] for a in listed["agents"]] == ["gamma"]
        async with http.delete(f"{again.url}/v2/admin/agents/gamma",
                               headers=top.headers("root")) as resp:
            assert resp.status == 200
        async with http.post(f"{again.url}/gamma/v2/tasks", json=task,
                             headers=top.headers("root")) as resp:
            assert resp.status == 404
        status, _ = await get_json(http, f"{again.url}/gamma/.well-known/agent-card.json")
        assert status == 404
        async with http.delete(f"{again.url}/v2/admin/agents/gamma",
                               headers=top.headers("root")) as resp:
            assert resp.status == 404
    finally:
        await again.stop()
    # Removed is removed for good.
    final = Daemon(load_config(top.config_path))
    await final.start()
    try:
        status, _ = await get_json(http, f"{final.url}/gamma/.well-known/agent-card.json")
        assert status == 404
    finally:
        await final.stop()


async def test_a_config_agent_cannot_be_removed_at_run_time(swarm: Swarm,
                                                            http: aiohttp.ClientSession) -> None:
    alpha, _ = hosted_entry("alpha")
    top = await swarm.start("top", callers={"root": {"tier": "admin"}},
                            extra={"agents": [alpha]})
    async with http.delete(f"{top.url}/v2/admin/agents/alpha",
                           headers=top.headers("root")) as resp:
        assert resp.status == 400
    status, _ = await get_json(http, f"{top.url}/alpha/.well-known/agent-card.json")
    assert status == 200


async def test_the_cli_adds_lists_and_removes_agents(tmp_path: Path, swarm: Swarm) -> None:
    top = await swarm.start("top", callers={"operator": {}, "root": {"tier": "admin"}})
    delta, delta_tokens = hosted_entry("delta")
    entry_file = tmp_path / "delta.yaml"
    entry_file.write_text(yaml.safe_dump(delta))
    root = top.tokens["root"]
    code, out, err = await run_cli("agents", "add", top.url, str(entry_file), token=root)
    assert code == 0, err
    assert out.strip() == f"hosting delta at {top.url}/delta"
    inst = hosted(top, "delta", delta_tokens)
    status, task = await post_task(inst, {"task": "hi", "skill": "echo"})
    assert status == 200 and task["state"] == "completed"
    code, out, err = await run_cli("agents", "list", top.url, token=root)
    assert code == 0 and out.startswith(f"delta  {top.url}/delta  (admin)  skills: echo"), err
    code, out, err = await run_cli("agents", "add", top.url, str(entry_file), token=root)
    assert code == 1 and "agent_exists" in err
    code, out, err = await run_cli("agents", "remove", top.url, "delta",
                                   token=top.tokens["operator"])
    assert code == 1 and "forbidden" in err
    code, out, err = await run_cli("agents", "remove", top.url, "delta", token=root)
    assert code == 0 and out.strip() == "removed delta", err
    status, _ = await get_json(top.session, f"{top.url}/delta/.well-known/agent-card.json")
    assert status == 404


@asynccontextmanager
async def answering(answer: object) -> AsyncIterator[str]:
    """The URL of a server that answers /v2/admin/agents with ``answer``, whatever is asked."""
    async def junk(request: web.Request) -> web.Response:
        return web.json_response(answer)

    app = web.Application()
    app.router.add_route("*", "/v2/admin/agents", junk)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("answer", [[], {"agents": [{}]}, {"agents": [1]}, {},
                                    {"id": 1, "url": "u", "source": "admin", "skills": []}])
async def test_the_cli_says_so_in_one_line_when_the_url_is_no_daemon(
        tmp_path: Path, answer: object) -> None:
    entry = tmp_path / "e.yaml"
    entry.write_text(yaml.safe_dump(hosted_entry("e")[0]))
    async with answering(answer) as url:
        for argv in (("list", url), ("add", url, str(entry))):
            code, _, err = await run_cli("agents", *argv, token="t")
            assert code == 1 and re.fullmatch(r"butler: peer_error: [^\n]+\n", err), (argv, err)
    entry.write_bytes(b"\xff\xfe")  # not UTF-8: read before any request
    code, _, err = await run_cli("agents", "add", "http://127.0.0.1:9", str(entry), token="t")
    assert code == 2 and err.startswith(f"butler: cannot read {entry}:") and "Traceback" not in err


async def test_the_cli_prints_what_a_daemon_says_without_control_characters() -> None:
    forged = {"id": "x\x1b[2J\nforged", "url": "u", "source": "admin", "skills": []}
    async with answering({"agents": [forged]}) as url:
        code, out, err = await run_cli("agents", "list", url, token="t")
    assert code == 0 and out == "x [2J forged  u  (admin)  skills: -\n", (out, err)


async def test_an_agent_that_cannot_be_kept_is_neither_added_nor_removed(
        swarm: Swarm) -> None:
    top = await swarm.start("top", callers={"root": {"tier": "admin"}})
    admin, root = f"{top.url}/v2/admin/agents", top.headers("root")
    one, _ = hosted_entry("one")
    async with top.session.post(admin, json=one, headers=root) as resp:
        assert resp.status == 201
    kept = top.daemon.config.data_dir / "hosted_agents.json"
    kept.unlink()
    kept.mkdir()  # the file can no longer be replaced
    two, _ = hosted_entry("two")
    for method, url, body in (("POST", admin, two), ("DELETE", f"{admin}/one", None)):
        async with top.session.request(method, url, json=body, headers=root) as resp:
            answer = await resp.json()
            assert resp.status == 503 and answer["error"]["code"] == "overloaded", answer
            assert "hosted_agents.json" in answer["error"]["message"]
    for agent_id, served in (("one", 200), ("two", 404)):  # as before either request
        status, _ = await get_json(top.session,
                                   f"{top.url}/{agent_id}/.well-known/agent-card.json")
        assert status == served, agent_id


async def test_removing_an_agent_ends_its_running_tasks_and_keeps_its_data(
        swarm: Swarm) -> None:
    top = await swarm.start("top", callers={"operator": {}, "root": {"tier": "admin"}},
                            extra={"server": {"shutdown_grace_seconds": 0.2},
                                   "hosting": {"allow_local_access": True}})
    http = top.session
    admin = f"{top.url}/v2/admin/agents"
    gamma, gamma_tokens = hosted_entry("gamma", skills=[WAIT])
    async with http.post(admin, json=gamma, headers=top.headers("root")) as resp:
        assert resp.status == 201
    inst = hosted(top, "gamma", gamma_tokens)
    key = inst.daemon.identity.kid
    status, task = await post_task(inst, {"task": "x", "skill": "wait", "mode": "async"})
    assert status in (200, 202), task
    await wait_task(inst, task["id"], {"working"}, message="waiting")
    async with http.delete(f"{admin}/gamma", headers=top.headers("root")) as resp:
        assert resp.status == 200
    async with http.post(admin, json=gamma, headers=top.headers("root")) as resp:
        assert resp.status == 201  # the same id again: its data folder was kept
    again = hosted(top, "gamma", gamma_tokens)
    assert again.daemon.identity.kid == key
    ended = await wait_task(again, task["id"])
    assert ended["state"] in ("canceled", "failed"), ended


async def test_the_admin_api_hosts_at_most_max_agents(swarm: Swarm) -> None:
    alpha, _ = hosted_entry("alpha")  # of the config file: does not count
    top = await swarm.start("top", callers={"root": {"tier": "admin"}},
                            extra={"agents": [alpha], "hosting": {"max_agents": 1}})
    admin, root = f"{top.url}/v2/admin/agents", top.headers("root")
    one, two = hosted_entry("one")[0], hosted_entry("two")[0]
    async with top.session.post(admin, json=one, headers=root) as resp:
        assert resp.status == 201, await resp.text()
    async with top.session.post(admin, json=two, headers=root) as resp:
        body = await resp.json()
        assert resp.status == 409 and body["error"]["code"] == "too_many_agents", body
        assert "hosting.max_agents (1)" in body["error"]["message"]
    status, _ = await get_json(top.session, f"{top.url}/two/.well-known/agent-card.json")
    assert status == 404  # nothing of it was started
    async with top.session.delete(f"{admin}/one", headers=root) as resp:
        assert resp.status == 200
    async with top.session.post(admin, json=two, headers=root) as resp:
        assert resp.status == 201, await resp.text()


async def test_no_agent_is_added_once_the_hosted_ones_are_stopping(swarm: Swarm) -> None:
    top = await swarm.start("top", callers={"root": {"tier": "admin"}})
    host = top.daemon.agents
    assert host is not None
    await host.close()  # the daemon's stop does this first, while it still listens
    one, _ = hosted_entry("one")
    async with top.session.post(f"{top.url}/v2/admin/agents", json=one,
                                headers=top.headers("root")) as resp:
        body = await resp.json()
        assert resp.status == 503 and body["error"]["code"] == "overloaded", body
    assert host.running == {}  # else a daemon no one would ever stop


@pytest.mark.parametrize(("kept", "problem"), [
    (b'{"agents": [{"id": "x", "token_hashes": ["nothex"]}]}', "agent 'x': token_hashes[0]"),
    (b'{"agents": [{"id": "x", "token_hashes": []}], ', "cannot read the hosted agents"),
    (b'{"agents": {"x": 1}}', "expected"),
])
async def test_a_damaged_hosted_agents_file_stops_start_up_naming_it(
        tmp_path: Path, kept: bytes, problem: str) -> None:
    cfg, _ = config_dict(tmp_path, "top")
    config = load_config(write_config(tmp_path, "top", cfg))
    config.data_dir.mkdir(parents=True)
    (config.data_dir / "hosted_agents.json").write_bytes(kept)
    daemon = Daemon(config)
    with pytest.raises(SetupError) as info:
        await daemon.start()
    assert "hosted_agents.json" in info.value.message and problem in info.value.message


async def test_the_data_commands_read_a_hosted_agents_folder(swarm: Swarm) -> None:
    alpha, alpha_tokens = hosted_entry("alpha")
    top = await swarm.start("top", callers={"operator": {}, "root": {"tier": "admin"}},
                            extra={"agents": [alpha]})
    kept, _ = hosted_entry("kept")
    async with top.session.post(f"{top.url}/v2/admin/agents", json=kept,
                                headers=top.headers("root")) as resp:
        assert resp.status == 201
    status, _ = await post_task(hosted(top, "alpha", alpha_tokens), {"task": "hi",
                                                                      "skill": "echo"})
    assert status == 200
    config = str(top.config_path)
    for agent_id in ("alpha", "kept"):
        kid = hosted(top, agent_id, {}).daemon.identity.kid
        code, out, err = await run_cli("key", "show", "-c", config, "--agent", agent_id)
        assert code == 0 and out.startswith(f"kid: {kid}\n"), err
    code, out, err = await run_cli("audit", "verify", "-c", config, "--agent", "alpha")
    assert code == 0, err
    code, out, err = await run_cli("audit", "tail", "-c", config, "--agent", "alpha", "--json")
    assert code == 0 and "echo" in out, err  # alpha's task, not in the daemon's own trail
    code, out, err = await run_cli("audit", "tail", "-c", config, "--json")
    assert code == 0 and "echo" not in out, err
    code, out, err = await run_cli("key", "show", "-c", config, "--agent", "nobody")
    assert code == 2 and "no hosted agent 'nobody'" in err
