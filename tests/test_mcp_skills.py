"""MCP servers as skill providers: tests/mcp_server_fixture.py, a real MCP server over
stdio, behind a real daemon (docs/mcp.md#mcp-servers-as-skills)."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from butler.config import load_config
from butler.config.node import ConfigError
from butler.skills.mcp_servers import supervisor
from tests.mcp_support import FIXTURE, calc
from tests.support import (
    ECHO,
    Instance,
    Swarm,
    call,
    child_env,
    config_dict,
    kill_quietly,
    post_task,
    process_gone,
    wait_gone,
    wait_until,
    write_config,
)


def started(pids: Path) -> list[int]:
    return [int(line) for line in pids.read_text().split()] if pids.exists() else []


async def run(inst: Instance, skill: str, **body: Any) -> dict[str, Any]:
    status, task = await post_task(inst, {"skill": skill, "task": "go", **body})
    assert status == 200, task
    return task


async def wait_file(path: Path) -> None:
    await wait_until(path.exists, what=f"{path} exists")


async def card_skills(inst: Instance) -> dict[str, dict[str, Any]]:
    async with inst.session.get(inst.url + "/v2/card", headers=inst.headers()) as resp:
        card = await resp.json()
    return {s["id"]: s for s in card["skills"]}


async def test_tools_are_skills_that_run(swarm: Swarm, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    loud = {"id": "loud", "mcp": {"command": [sys.executable, str(FIXTURE)],
                                  "tools": ["shout"]},
            "capabilities": ["shouting"], "expose": True}
    home = await swarm.start("home", skills=[ECHO, calc(pids), loud])
    skills = await card_skills(home)
    assert {"calc.add", "calc.shout", "calc.hang", "calc.crash", "calc.fail",
            "loud.shout"} <= set(skills)
    assert not any(s.startswith("loud.") and s != "loud.shout" for s in skills)
    assert skills["calc.add"]["description"] == "Add two integers"
    assert skills["calc.add"]["capabilities"] == ["calc", "calc.add"]
    assert skills["loud.shout"]["capabilities"] == ["shouting", "loud.shout"]
    # The tool's own schema and what a tool cannot carry of the skill API.
    schema = skills["calc.add"]["input_schema"]
    assert schema["type"] == "object" and set(schema["properties"]) == {"a", "b"}
    assert skills["calc.add"]["bridge_fidelity"]["level"] == "adapted"
    assert skills["echo"]["bridge_fidelity"]["level"] == "lossless"

    added = await run(home, "calc.add", input={"a": 2, "b": 40})
    assert added["state"] == "completed", added
    # The tool's JSON text repeats its structured content: one data part carries it.
    assert added["result"]["parts"] == [{"kind": "data", "data": {"sum": 42}}]

    # The task's words fill the tool's ``text`` property.
    shouted = await run(home, "loud.shout", task="hello")
    assert shouted["state"] == "completed", shouted
    assert shouted["result"]["parts"][0] == {"kind": "text", "text": "HELLO!"}

    failed = await run(home, "calc.fail", input={"reason": "no such thing"})
    assert failed["state"] == "failed"
    assert failed["error"]["code"] == "tool_error"
    assert "no such thing" in failed["error"]["message"]
    assert len(started(pids)) == 1  # one process, shared by the entry's tools


async def test_a_hanging_call_times_out_and_the_server_goes_on(swarm: Swarm,
                                                                tmp_path: Path) -> None:
    home = await swarm.start("home", skills=[calc(tmp_path / "pids", timeout_seconds=0.5)])
    hung = await run(home, "calc.hang")
    assert hung["state"] == "failed" and hung["error"]["code"] == "task_timeout", hung
    shouted = await run(home, "calc.shout", task="still here")
    assert shouted["state"] == "completed", shouted
    assert len(started(tmp_path / "pids")) == 1  # the call was cancelled, not the server


async def test_a_call_that_blocks_the_server_past_a_ping_succeeds(
        swarm: Swarm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Liveness is the process and idle-time pings: a call in flight is bounded by the
    skill's time limit alone, even when the tool blocks its server's loop for longer than
    the ping interval (issue 38)."""
    monkeypatch.setattr(supervisor, "PING_SECONDS", 0.1)
    pids = tmp_path / "pids"
    home = await swarm.start("home", skills=[calc(pids, timeout_seconds=30)])
    blocked = await run(home, "calc.block", input={"seconds": 1})
    assert blocked["state"] == "completed", blocked
    assert blocked["result"]["parts"][0] == {"kind": "text", "text": "blocked 1s"}
    assert len(started(pids)) == 1


async def test_a_stuck_server_is_restarted_after_its_call_timed_out(
        swarm: Swarm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "PING_SECONDS", 0.1)
    pids = tmp_path / "pids"
    home = await swarm.start("home", skills=[calc(pids, timeout_seconds=0.3)])
    stuck = await run(home, "calc.block", input={"seconds": 30})
    assert stuck["state"] == "failed" and stuck["error"]["code"] == "task_timeout", stuck
    # Idle now, and deaf to pings: ended and started again.
    await wait_until(lambda: len(started(pids)) >= 2, 20, "the stuck server restarted")
    [first, *_] = started(pids)
    await wait_gone(first)


async def test_cancelling_the_task_cancels_the_call(swarm: Swarm, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    home = await swarm.start("home", skills=[calc(pids)])
    _, task = await post_task(home, {"skill": "calc.hang", "task": "go", "mode": "async"})
    await wait_file(Path(f"{pids}.hanging"))
    status, canceled = await call(home, "POST", f"/v2/tasks/{task['id']}/cancel")
    assert status == 200 and canceled["state"] == "canceled", canceled
    await wait_file(Path(f"{pids}.cancelled"))  # the server heard: notifications/cancelled
    assert (await run(home, "calc.add", input={"a": 1, "b": 2}))["state"] == "completed"
    assert len(started(pids)) == 1


async def test_output_over_the_cap_fails_the_task(swarm: Swarm, tmp_path: Path) -> None:
    home = await swarm.start("home", skills=[calc(tmp_path / "pids", max_output_bytes=1000)])
    flood = await run(home, "calc.flood", input={"size": 5000})
    assert flood["state"] == "failed" and flood["error"]["code"] == "output_too_large", flood
    small = await run(home, "calc.flood", input={"size": 10})
    assert small["state"] == "completed", small


async def test_a_crashed_server_is_restarted(swarm: Swarm, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    home = await swarm.start("home", skills=[calc(pids)])
    [first] = started(pids)
    crashed = await run(home, "calc.crash")
    assert crashed["state"] == "failed", crashed
    assert crashed["error"]["code"] == "skill_unavailable"
    await wait_gone(first)
    # During the outage tasks fail ``skill_unavailable``; after the restart they run.
    async def ran() -> dict[str, Any] | None:
        task = await run(home, "calc.add", input={"a": 1, "b": 1})
        if task["state"] == "completed":
            return task
        assert task["error"]["code"] == "skill_unavailable", task
        return None

    task: dict[str, Any] = await wait_until(ran, 20)
    assert task["result"]["parts"] == [{"kind": "data", "data": {"sum": 2}}]
    assert len(started(pids)) == 2


async def test_a_server_killed_between_calls_is_restarted(swarm: Swarm,
                                                          tmp_path: Path) -> None:
    """No call notices it: the supervisor's ping does."""
    pids = tmp_path / "pids"
    home = await swarm.start("home", skills=[calc(pids)])
    [first] = started(pids)
    kill_quietly(first)
    await wait_until(lambda: len(started(pids)) >= 2, 30, "the supervisor restarted it")

    async def ran() -> dict[str, Any] | None:
        task = await run(home, "calc.add", input={"a": 2, "b": 2})
        return task if task["state"] == "completed" else None

    task: dict[str, Any] = await wait_until(ran)
    assert task["result"]["parts"] == [{"kind": "data", "data": {"sum": 4}}]


async def test_stopping_the_daemon_ends_the_server(swarm: Swarm, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    home = await swarm.start("home", skills=[calc(pids)],
                             extra={"server": {"shutdown_grace_seconds": 0.2}})
    # A call in flight at the stop, too: cancelled once the grace is over.
    await post_task(home, {"skill": "calc.hang", "task": "go", "mode": "async"})
    await wait_file(Path(f"{pids}.hanging"))
    [pid] = started(pids)
    assert not process_gone(pid)
    await swarm.stop(home)
    assert process_gone(pid)


async def test_a_server_that_does_not_start_leaves_the_daemon_up(
        swarm: Swarm, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broken = {"id": "broken", "mcp": {"command": [sys.executable, "-c", "raise SystemExit(1)"]},
              "expose": True}
    with caplog.at_level(logging.WARNING, "butler.skills.mcp_servers"):
        home = await swarm.start("home", skills=[ECHO, broken])
    assert set(await card_skills(home)) == {"echo"}
    # Retried with back-off: 1 s, then 2 s...
    await wait_until(lambda: any("restarting in 2s" in r.getMessage() for r in caplog.records))
    assert any("MCP server broken" in r.getMessage() and "restarting in 1s" in r.getMessage()
               for r in caplog.records)
    echoed = await run(home, "echo", task="up")
    assert echoed["state"] == "completed"


@pytest.mark.parametrize(("entry", "problem"), [
    ({"url": "http://127.0.0.1:9/mcp", "command": ["x"]}, "exactly one of command"),
    ({"tools": ["add"]}, "exactly one of command"),
    ({"url": "ftp://example.org/mcp"}, "expected an http"),
    ({"command": []}, "at least the program"),
    ({"command": ["x"], "token_env": "HOME"}, "a command gets no token"),
    ({"url": "http://127.0.0.1:9/mcp", "token_env": "NO_SUCH_VARIABLE_HERE"}, "is not set"),
])
def test_mcp_entry_errors_name_the_key(tmp_path: Path, entry: dict[str, Any],
                                       problem: str) -> None:
    cfg, _ = config_dict(tmp_path, "home", skills=[{"id": "calc", "mcp": entry}])
    with pytest.raises(ConfigError, match=problem) as err:
        load_config(write_config(tmp_path, "home", cfg))
    assert "skills" in str(err.value) and "mcp" in str(err.value)


async def test_a_tool_whose_id_is_taken_is_left_out(swarm: Swarm, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    taken = {**ECHO, "id": "calc.add"}
    with caplog.at_level(logging.WARNING, "butler.skills"):
        home = await swarm.start("home", skills=[taken, calc(tmp_path / "pids")])
    assert (await card_skills(home))["calc.add"]["capabilities"] == ["echo"]
    assert any("'calc.add'" in r.getMessage() and "taken" in r.getMessage()
               for r in caplog.records)
    echoed = await run(home, "calc.add", task="the configured skill")
    assert echoed["result"]["parts"][0] == {"kind": "text", "text": "the configured skill"}


async def test_a_server_over_streamable_http(swarm: Swarm, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """Its URL goes through the outbound guard: loopback passes (an operator's config),
    a metadata address never does. The configured token is sent; without it the server
    answers 401 and publishes no tools."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pids = tmp_path / "pids"
    (tmp_path / "mcp-token").write_text("s3cret-mcp\n")
    server = await asyncio.create_subprocess_exec(
        sys.executable, str(FIXTURE), str(pids), "--http", str(port),
        env=child_env(FIXTURE_TOKEN="s3cret-mcp"),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        remote = {"id": "remote", "mcp": {"url": url, "token_file": str(tmp_path / "mcp-token")},
                  "expose": True}
        anonymous = {"id": "anon", "mcp": {"url": url}, "expose": True}
        metadata = {"id": "meta", "mcp": {"url": "http://169.254.169.254/mcp"}, "expose": True}
        with caplog.at_level(logging.WARNING, "butler.skills.mcp_servers"):
            home = await swarm.start("home", skills=[remote, anonymous, metadata])
            # The server may not listen yet at the first try: the retry finds it.
            async def listed() -> bool:
                return "remote.add" in await card_skills(home)

            await wait_until(listed, 20)
        added = await run(home, "remote.add", input={"a": 20, "b": 22})
        assert added["result"]["parts"] == [{"kind": "data", "data": {"sum": 42}}], added
        failed = await run(home, "remote.fail")
        assert failed["error"]["code"] == "tool_error"
        # Every kind of block, over this transport too (tests/test_mcp_fidelity.py).
        media = await run(home, "remote.media", input={})
        assert [p["kind"] for p in media["result"]["parts"]] == [
            "text", "file", "file", "file", "text", "file"], media
        assert not any(s.startswith(("meta.", "anon.")) for s in await card_skills(home))
        assert any("MCP server anon" in r.getMessage() for r in caplog.records)
        assert not any("s3cret-mcp" in r.getMessage() for r in caplog.records)
        assert any("MCP server meta" in r.getMessage() and "outbound guard" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
        await swarm.stop(home)
    finally:
        kill_quietly(server.pid)
        await server.wait()


async def test_the_token_goes_only_to_the_configured_origin() -> None:
    """The SDK could be told of another URL (a redirect is an answer, but a server can
    name another endpoint): the bearer token is for the configured one alone."""
    import httpx2
    from aiohttp import web

    from butler.skills.mcp_servers.http_bridge import GuardedTransport

    seen: list[str | None] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(text="{}")

    app = web.Application()
    app.router.add_post("/mcp", record)
    runners = []
    ports = []
    for _ in range(2):
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        ports.append(runner.addresses[0][1])
    transport = GuardedTransport(f"http://127.0.0.1:{ports[0]}/mcp", "tok-1")
    try:
        async with httpx2.AsyncClient(transport=transport) as client:
            await client.post(f"http://127.0.0.1:{ports[0]}/mcp", content=b"{}",
                              headers={"Authorization": "Bearer forged"})
            await client.post(f"http://127.0.0.1:{ports[1]}/mcp", content=b"{}",
                              headers={"Authorization": "Bearer forged"})
    finally:
        for runner in runners:
            await runner.cleanup()
    assert seen == ["Bearer tok-1", None]


def test_answers_become_parts() -> None:
    """Content the fixture server does not send: images and resources, an exact number."""
    from decimal import Decimal

    from mcp.types import (
        CallToolResult,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextResourceContents,
        Tool,
    )

    from butler.skills.base import SkillFailed
    from butler.skills.mcp_servers.tool import arguments, to_result
    from internal.protocol.a2a.model import Part

    result = to_result(CallToolResult(content=[
        ImageContent(data="aGk=", mime_type="image/png"),
        ResourceLink(uri="file:///notes/a.md", name="a.md", mime_type="text/markdown"),
        EmbeddedResource(resource=TextResourceContents(uri="file:///b.txt", text="bee")),
    ]), 1000)
    assert result.parts == (
        Part(file={"bytes": "aGk=", "mimeType": "image/png"}),
        Part(file={"uri": "file:///notes/a.md", "name": "a.md", "mimeType": "text/markdown"}),
        Part(text="bee", metadata={"butler/mcp": {"type": "resource", "uri": "file:///b.txt"}}),
    )
    with pytest.raises(SkillFailed) as err:
        to_result(CallToolResult(content=[], is_error=True), 1000)
    assert err.value.code == "tool_error"

    tool = Tool(name="t", input_schema={"type": "object", "properties": {
        "task": {"type": "string"}, "text": {"type": "string"}}})
    given = {"x": Decimal("1.5"), "n": Decimal("2"), "deep": [{"y": Decimal("0.25")}]}
    assert arguments(tool, "do it", given) == {
        "x": 1.5, "n": 2, "deep": [{"y": 0.25}], "task": "do it"}


def test_without_the_sdk_the_config_names_the_extra(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK is an optional extra: a config with an mcp skill says how to install it."""
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if it were not installed
    cfg, _ = config_dict(tmp_path, "home", skills=[calc(tmp_path / "pids")])
    with pytest.raises(ConfigError, match=r"pip install 'butler-a2a\[mcp\]'") as err:
        load_config(write_config(tmp_path, "home", cfg))
    assert "skills[0].mcp" in str(err.value)
    # A config without one does not need it.
    load_config(write_config(tmp_path, "home", config_dict(tmp_path, "home")[0]))
