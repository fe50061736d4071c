"""``butler mcp`` as a real child process, driven by the official MCP SDK's stdio client."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mcp.types import TextContent

from tests.a2a_support import ASK, WAIT
from tests.delegation_support import skill
from tests.mcp_support import cancel_after_progress, mcp_butler
from tests.support import (
    ECHO,
    Swarm,
    command_skill,
    config_dict,
    plugin_skill,
)


def _texts(result: Any) -> list[str]:
    return [c.text for c in result.content if isinstance(c, TextContent)]


async def test_tools_are_the_allowed_skills_and_a_call_runs_one(tmp_path: Path) -> None:
    cfg, _ = config_dict(tmp_path, "desk", skills=[ECHO, ASK, skill("pricey", "2.00")],
                         configurations={"mcp_server": {
                             "allowed_capabilities": ["echo", "pricey"]}})
    async with mcp_butler(tmp_path, cfg) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {"delegate", "echo", "pricey"}  # "ask" is not allowed
        assert tools["echo"].input_schema["properties"]["task"]["type"] == "string"
        assert tools["delegate"].input_schema["required"] == ["capabilities", "task"]

        result = await session.call_tool("echo", {"task": "hello over mcp"})
        assert not result.is_error and _texts(result) == ["hello over mcp"]
        # No data part, no structured content; the task rides in _meta (issue 38).
        assert result.structured_content is None
        assert result.meta is not None
        assert result.meta["butler/task"]["state"] == "completed"

        # A refusal by the swarm rules is a tool error with its code, not a protocol error.
        refused = await session.call_tool("delegate", {
            "capabilities": ["pricey"], "task": "too dear", "budget_usd": "1.00"})
        assert refused.is_error and refused.structured_content is not None
        assert refused.structured_content["code"] == "budget_exhausted"
        assert _texts(refused)[0].startswith("budget_exhausted: ")

        unknown = await session.call_tool("ask", {"task": "hidden"})
        assert unknown.is_error and unknown.structured_content is not None
        assert unknown.structured_content["code"] == "not_found"
    log = (tmp_path / "mcp-stderr.log").read_text()
    assert "serving MCP on stdio" in log and "stopped" in log


async def test_a_declared_input_schema_is_the_tool_schema_and_its_arguments_the_input(
    tmp_path: Path,
) -> None:
    schema = {"type": "object", "required": ["n"],
              "properties": {"task": {"type": "string"}, "n": {"type": "integer"}}}
    cfg, _ = config_dict(tmp_path, "desk", skills=[
        ECHO, plugin_skill("about", "tests.plugins.sample:about", input_schema=schema),
        command_skill("count", [sys.executable, "-c", "print(1)"])])
    async with mcp_butler(tmp_path, cfg) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert tools["about"].input_schema == schema
        assert tools["echo"].input_schema["properties"]["task"]["type"] == "string"
        # Seen from MCP, every tool has the edge's own caveat besides its runner's.
        fidelity = {n: (t.meta or {}).get("butler/bridge_fidelity") for n, t in tools.items()}
        assert fidelity["about"] is not None and fidelity["about"]["level"] == "adapted"
        assert fidelity["about"]["caveats"][0] == "input-required tasks are canceled"
        assert fidelity["count"] is not None
        assert "input-required tasks are canceled" in fidelity["count"]["caveats"]
        assert "no input-required" in fidelity["count"]["caveats"]

        result = await session.call_tool("about", {"task": "count to n", "n": 3})
        assert not result.is_error, result
        seen = json.loads(_texts(result)[0])
        assert seen["text"] == "count to n"
        assert seen["input"] == {"task": "count to n", "n": 3}

        # Arguments are validated against the published schema before any task is made:
        # a tool error naming the failing path (issue 38).
        cases: list[tuple[dict[str, Any], str]] = [({"n": "three"}, "/n"),
                                                   ({"task": "no n"}, "")]
        for arguments, path in cases:
            refused = await session.call_tool("about", arguments)
            assert refused.is_error and refused.structured_content is not None
            assert refused.structured_content["code"] == "invalid_params"
            assert refused.structured_content["path"] == path, refused
            assert _texts(refused)[0].startswith(f"invalid_params: input{path}: ")
        cases = [({"task": 7}, "/task"), ({"task": "x", "capabilities": []}, "/capabilities")]
        for arguments, path in cases:
            refused = await session.call_tool("delegate" if "capabilities" in arguments
                                              else "echo", arguments)
            assert refused.is_error and refused.structured_content is not None
            assert refused.structured_content["path"] == path, refused


async def test_delegate_goes_to_a_peer_through_the_swarm(swarm: Swarm, tmp_path: Path) -> None:
    office = await swarm.start("office", callers={"home": {}},
                               skills=[skill("office.echo")])
    token_file = tmp_path / "home-to-office.token"
    token_file.write_text(office.tokens["home"])
    cfg, _ = config_dict(tmp_path, "home", peers=[{
        "name": "office", "url": office.url, "token_file": str(token_file),
        "capabilities": ["office.echo"]}])
    async with mcp_butler(tmp_path, cfg) as session:
        result = await session.call_tool("delegate", {
            "capabilities": ["office.echo"], "task": "from the desktop"})
        assert not result.is_error, result
        assert _texts(result) == ["from the desktop"]
        page = await office.client("home").list_tasks()
        assert [t["skill"] for t in page["tasks"]] == ["office.echo"]


async def test_progress_and_cancel_reach_the_task(tmp_path: Path) -> None:
    cfg, _ = config_dict(tmp_path, "desk", skills=[ECHO, WAIT])
    async with mcp_butler(tmp_path, cfg) as session:
        await cancel_after_progress(session)
        # The server goes on serving after a canceled call.
        assert _texts(await session.call_tool("echo", {"task": "still here"})) == ["still here"]
    # Canceled, not cut off by the stop that follows: the operator's log says which.
    log = (tmp_path / "mcp-stderr.log").read_text()
    assert "state=canceled skill=wait" in log, log
