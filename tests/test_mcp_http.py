"""MCP over streamable HTTP at ``/mcp`` in a real daemon, driven by the official SDK's client."""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from tests.support import ECHO, Instance, Swarm

VIP = {"id": "vip", "builtin": "echo", "capabilities": ["vip"], "expose": True, "tier": "gold"}
CALLERS = {"gold": {"tier": "gold"}, "plain": {}}


@asynccontextmanager
async def mcp_http(inst: Instance, who: str) -> AsyncIterator[ClientSession]:
    async with httpx2.AsyncClient(headers=inst.headers(who)) as client, \
            streamable_http_client(f"{inst.url}/mcp", http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def test_a_token_lists_the_tools_its_identity_sees_and_calls_one(swarm: Swarm) -> None:
    inst = await swarm.start("web", callers=CALLERS, skills=[ECHO, VIP])
    async with mcp_http(inst, "gold") as session:
        assert {t.name for t in (await session.list_tools()).tools} == {
            "delegate", "echo", "vip"}
        result = await session.call_tool("vip", {"task": "hello over http"})
        assert not result.is_error
        assert [c.text for c in result.content if isinstance(c, TextContent)] == [
            "hello over http"]
        assert result.structured_content is not None
        assert result.structured_content["state"] == "completed"
        task_id = result.structured_content["task_id"]
    # The caller is the token's identity, not a fixed admin: a tier-gold skill is hidden
    # from a default-tier token, and the task belongs to the gold caller.
    async with mcp_http(inst, "plain") as session:
        assert {t.name for t in (await session.list_tools()).tools} == {"delegate", "echo"}
        hidden = await session.call_tool("vip", {"task": "no"})
        assert hidden.is_error and hidden.structured_content is not None
        assert hidden.structured_content["code"] == "not_found"
    async with inst.session.get(f"{inst.url}/v2/tasks/{task_id}",
                                headers=inst.headers("plain")) as resp:
        assert resp.status == 404
    async with inst.session.get(f"{inst.url}/v2/tasks/{task_id}",
                                headers=inst.headers("gold")) as resp:
        assert resp.status == 200


async def test_without_a_valid_token_mcp_is_refused(swarm: Swarm) -> None:
    inst = await swarm.start("web")
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        async with inst.session.post(f"{inst.url}/mcp", json=body, headers=headers) as resp:
            assert resp.status == 401
    statuses: list[int] = []

    async def seen(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    # The SDK raises (an error wrapped in task groups); the status is the 401 of the gate.
    with pytest.raises(BaseExceptionGroup):
        async with httpx2.AsyncClient(event_hooks={"response": [seen]}) as client, \
                streamable_http_client(f"{inst.url}/mcp", http_client=client) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
    assert statuses == [401]
    accept = {"Accept": "application/json, text/event-stream", **inst.headers()}
    async with inst.session.post(f"{inst.url}/mcp", json=body, headers=accept) as resp:
        assert resp.status == 200  # the same request with a token gets through
        answer = await resp.json()
    assert {t["name"] for t in answer["result"]["tools"]} == {"delegate", "echo"}
    # No stream to open: a GET would otherwise hang until the daemon stops.
    async with inst.session.get(f"{inst.url}/mcp", headers=accept) as resp:
        assert resp.status == 405


async def test_without_the_sdk_the_daemon_serves_no_mcp_and_says_so(
    swarm: Swarm, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setitem(sys.modules, "mcp.server.streamable_http_manager", None)
    caplog.set_level(logging.INFO, "butler.mcp")
    inst = await swarm.start("bare", configurations={"mcp_server": {
        "allowed_capabilities": ["echo"]}})
    async with inst.session.post(f"{inst.url}/mcp", json={}, headers=inst.headers()) as resp:
        assert resp.status == 404
    assert [r.getMessage() for r in caplog.records if "/mcp" in r.getMessage()] == [
        "no /mcp: the MCP SDK is not installed (pip install 'butler-a2a[mcp]')"]
