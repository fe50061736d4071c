"""Everything an MCP tool answers reaches an MCP host through Butler, and every tool is
honest about itself (issue 38): tests/mcp_server_fixture.py (the official SDK's server)
is a Butler skill, and the official SDK's client calls it through Butler over streamable
HTTP (``/mcp``) and over stdio (``butler mcp``). The mapping: docs/mcp.md#what-maps."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ResourceLink,
    TextContent,
)

from butler.edges.mcp_names import TOOL_NAME, tool_names
from butler.skills.mcp_servers.content import MAX_INLINE_BYTES, to_content, to_parts
from internal.protocol.a2a.model import Part
from tests.a2a_support import rpc
from tests.mcp_server_fixture import BLOB, MEDIA, PNG
from tests.mcp_support import calc, mcp_butler, mcp_http
from tests.support import Swarm, config_dict, plugin_skill, post_task


async def check_tools_and_calls(session: ClientSession) -> None:
    tools = {t.name: t for t in (await session.list_tools()).tools}
    assert all(TOOL_NAME.fullmatch(name) for name in tools), sorted(tools)
    # Renamed by the one mapping; the skill id in the title and in _meta.
    add = tools["calc_add"]
    assert add.title == "calc.add"
    assert add.meta is not None and add.meta["butler/skill_id"] == "calc.add"
    # The upstream tool's output schema and annotations, as it gave them.
    assert add.output_schema is not None
    assert add.output_schema["additionalProperties"] == {"type": "integer"}
    shout = tools["calc_shout"]
    assert shout.annotations is not None
    assert shout.annotations.read_only_hint is True
    assert shout.annotations.destructive_hint is False
    assert shout.annotations.open_world_hint is False
    # A tool that runs only as an MCP task is withheld, not listed as callable.
    assert "calc_background" not in tools

    added = await session.call_tool("calc_add", {"a": 2, "b": 40})
    assert not added.is_error, added
    assert added.structured_content == {"sum": 42}
    assert added.content == [TextContent(text='{"sum": 42}')]
    assert added.meta is not None and added.meta["butler/task"]["state"] == "completed"
    assert added.meta["butler/task"]["id"] and added.meta["butler/task"]["trace_id"]
    # The original id is accepted on call too.
    by_id = await session.call_tool("calc.add", {"a": 1, "b": 1})
    assert by_id.structured_content == {"sum": 2}

    media = await session.call_tool("calc_media", {})
    assert not media.is_error, media
    assert media.content == MEDIA
    assert media.structured_content is None  # the tool gave none

    noon = await session.call_tool("calc_noon", {})  # {} is an input like any other
    assert not noon.is_error, noon
    assert noon.structured_content == {"result": "noon"}

    lied = await session.call_tool("calc_liar", {})
    assert lied.is_error and lied.structured_content is not None
    assert lied.structured_content["code"] == "invalid_output"


async def test_over_streamable_http(swarm: Swarm, tmp_path: Path,
                                    caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "butler.skills.mcp_servers"):
        home = await swarm.start("home", skills=[calc(tmp_path / "pids")])
    assert any("'background' is withheld" in r.getMessage() for r in caplog.records)
    async with mcp_http(home, "operator") as session:
        await check_tools_and_calls(session)


async def test_over_stdio(tmp_path: Path) -> None:
    cfg, _ = config_dict(tmp_path, "desk", skills=[calc(tmp_path / "pids")])
    async with mcp_butler(tmp_path, cfg) as session:
        await check_tools_and_calls(session)


async def test_a2a_carries_every_block_and_back(swarm: Swarm, tmp_path: Path) -> None:
    """The same answer as A2A parts, on /v2 and in A2A 1.0: each block kept, an embedded
    resource's URI in the part's metadata; {} is an input on /v2."""
    home = await swarm.start("home", skills=[calc(tmp_path / "pids")])
    status, task = await post_task(home, {"skill": "calc.media", "input": {}})
    assert status == 200 and task["state"] == "completed", task
    parts = task["result"]["parts"]
    assert [p["kind"] for p in parts] == ["text", "file", "file", "file", "text", "file"]
    assert parts[1]["file"] == {"bytes": PNG, "mimeType": "image/png"}
    assert parts[3]["file"]["uri"] == "file:///notes/a.md"
    assert parts[4]["metadata"]["butler/mcp"] == {"type": "resource", "uri": "file:///b.txt",
                                                 "mimeType": "text/plain"}

    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
               "parts": [{"data": {"skill": "calc.media", "input": {}}}]}
    _, body = await rpc(home, "SendMessage", {"message": message})
    [artifact] = body["result"]["task"]["artifacts"]
    v1 = artifact["parts"]
    assert v1[1] == {"raw": PNG, "mediaType": "image/png"}
    assert v1[3]["url"] == "file:///notes/a.md"
    assert v1[5]["raw"] == BLOB and v1[5]["metadata"]["butler/mcp"]["uri"] == "file:///c.bin"
    # A tool that needs MCP tasks is on no card.
    async with home.session.get(home.url + "/v2/card", headers=home.headers()) as resp:
        card = await resp.json()
    skills = {s["id"]: s for s in card["skills"]}
    assert "calc.background" not in skills
    # What cannot cross this bridge is on the card.
    assert "a request's file parts do not reach the tool: its arguments are JSON" in (
        skills["calc.add"]["bridge_fidelity"]["caveats"])


async def test_a_configured_output_schema_holds_the_answer(swarm: Swarm) -> None:
    """A skill's own ``output_schema`` is its tool's, and its answer is held to it."""
    def about(skill_id: str, required: str) -> dict[str, Any]:
        return plugin_skill(skill_id, "tests.plugins.sample:about", output_schema={
            "type": "object", "required": [required]})

    inst = await swarm.start("web", skills=[about("fits", "task_id"), about("misfit", "nope")])
    async with mcp_http(inst, "operator") as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert tools["fits"].output_schema == {"type": "object", "required": ["task_id"]}
        fits = await session.call_tool("fits", {"task": "x"})
        assert not fits.is_error and fits.structured_content is not None
        assert fits.structured_content["text"] == "x"
        misfit = await session.call_tool("misfit", {"task": "x"})
        assert misfit.is_error and misfit.structured_content is not None
        assert misfit.structured_content["code"] == "invalid_output"
        assert "'nope' is a required property" in misfit.structured_content["message"]


async def test_an_older_protocol_gets_blocks_it_knows(swarm: Swarm, tmp_path: Path) -> None:
    """A host that negotiated 2025-03-26 has no resource links nor structured content (a
    link is a text block, the data its JSON text); one of 2024-11-05 no audio either (an
    embedded blob). Raw JSON-RPC: the SDK client speaks the newest version only."""
    inst = await swarm.start("web", skills=[calc(tmp_path / "pids")])

    async def post(body: dict[str, Any], headers: dict[str, str]) -> tuple[str, Any]:
        async with inst.session.post(f"{inst.url}/mcp", json=body, headers=headers) as resp:
            assert resp.status in (200, 202), await resp.text()
            lines = [line[6:] for line in (await resp.text()).splitlines()
                     if line.startswith("data: ")]
            return resp.headers.get("Mcp-Session-Id", ""), json.loads(lines[-1]) \
                if lines else None

    for version in ("2025-03-26", "2024-11-05"):
        accept = {"Accept": "application/json, text/event-stream", **inst.headers()}
        session, _ = await post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "old", "version": "1"}}}, accept)
        named = {**accept, "Mcp-Session-Id": session, "Mcp-Protocol-Version": version}
        await post({"jsonrpc": "2.0", "method": "notifications/initialized"}, named)

        async def call(name: str, arguments: dict[str, Any],
                       named: dict[str, str] = named) -> dict[str, Any]:
            _, answer = await post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                    "params": {"name": name, "arguments": arguments}}, named)
            result: dict[str, Any] = answer["result"]
            return result

        added = await call("calc_add", {"a": 1, "b": 2})
        assert "structuredContent" not in added and added["content"] == [
            {"type": "text", "text": '{"sum": 3}'}]
        blocks = (await call("calc_media", {}))["content"]
        assert [b["type"] for b in blocks] == [
            "text", "image", "audio" if version == "2025-03-26" else "resource", "text",
            "resource", "resource"], blocks
        assert blocks[3]["text"] == "[a.md: file:///notes/a.md]"


def test_parts_become_blocks_and_back() -> None:
    """What no fixture sends: an A2A file by URL, one too large to inline, several data
    parts (no structured content then), and a tool answer's round trip."""
    parts, _ = to_parts(MEDIA, None)
    assert to_content(parts, "butler:task/t1") == (MEDIA, None)

    big = base64.b64encode(b"\0" * (MAX_INLINE_BYTES + 3)).decode()
    content, structured = to_content([
        Part(file={"uri": "https://example.org/r.pdf", "mimeType": "application/pdf"}),
        Part(file={"bytes": big, "mimeType": "image/png", "name": "huge.png"}),
        Part(file={"bytes": BLOB}),
        Part(data={"a": 1}), Part(data={"b": 2}),
    ], "butler:task/t1")
    assert content[0] == ResourceLink(uri="https://example.org/r.pdf", name="r.pdf",
                                      mime_type="application/pdf")
    assert isinstance(content[1], TextContent) and "huge.png" in content[1].text
    assert "not inlined" in content[1].text
    assert content[2] == EmbeddedResource(resource=BlobResourceContents(
        uri="butler:task/t1/parts/2", blob=BLOB, mime_type="application/octet-stream"))
    assert content[3:] == [TextContent(text='{"a": 1}'), TextContent(text='{"b": 2}')]
    assert structured is None
    _, one = to_content([Part(text="x"), Part(data={"a": 1})], "t")
    assert one == {"a": 1}
    # A result's own JSON text of its structured content is not a second part.
    parts, _ = to_parts(CallToolResult(content=[TextContent(text='{"a": 1}')],
                                       structured_content={"a": 1}).content, {"a": 1})
    assert parts == [Part(data={"a": 1})]


def test_tool_names_are_one_mapping() -> None:
    ids = ["echo", "calc.add", "calc_add", "a:b.c", "x.y", "x:y", "n" * 70, "m." + "m" * 90]
    names = tool_names(ids, reserved=("delegate",))
    assert names["echo"] == "echo" and names["calc_add"] == "calc_add"
    assert names["calc.add"] == "calc_add-" + hashlib.sha256(b"calc.add").hexdigest()[:8]
    assert names["a:b.c"] == "a_b_c"
    assert names["x.y"] != names["x:y"] and names["x.y"].startswith("x_y-")
    assert all(TOOL_NAME.fullmatch(n) for n in names.values())
    assert len(set(names.values())) == len(ids)
    assert tool_names(reversed(ids), reserved=("delegate",)) == names  # order does not matter
    assert tool_names(["delegate.x", "delegate_x"])["delegate.x"].startswith("delegate_x-")
