"""MCP over streamable HTTP at ``/mcp`` in a real daemon, driven by the official SDK's client."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from tests.a2a_support import WAIT
from tests.mcp_support import cancel_after_progress, mcp_http
from tests.support import ECHO, REPO, Swarm, wait_until

VIP = {"id": "vip", "builtin": "echo", "capabilities": ["vip"], "expose": True, "tier": "gold"}
CALLERS = {"gold": {"tier": "gold"}, "plain": {}}
OPENING = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "1"}}}


async def test_a_token_lists_the_tools_its_identity_sees_and_calls_one(swarm: Swarm) -> None:
    inst = await swarm.start("web", callers=CALLERS, skills=[ECHO, VIP])
    async with mcp_http(inst, "gold") as session:
        assert {t.name for t in (await session.list_tools()).tools} == {
            "delegate", "echo", "vip"}
        result = await session.call_tool("vip", {"task": "hello over http"})
        assert not result.is_error
        assert [c.text for c in result.content if isinstance(c, TextContent)] == [
            "hello over http"]
        assert result.meta is not None
        assert result.meta["butler/task"]["state"] == "completed"
        task_id = result.meta["butler/task"]["id"]
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


async def test_progress_and_cancel_over_http_reach_the_task(swarm: Swarm) -> None:
    """A call's answer is an SSE stream: its progress comes first; cancelling the call
    posts notifications/cancelled in the session, which cancels the task."""
    inst = await swarm.start("web", skills=[ECHO, WAIT])
    async with mcp_http(inst, "operator") as session:
        await cancel_after_progress(session)
        async def canceled() -> list[dict[str, Any]] | None:
            tasks: list[dict[str, Any]] = (await inst.client().list_tasks())["tasks"]
            return tasks if tasks and tasks[0]["state"] == "canceled" else None

        tasks: list[dict[str, Any]] = await wait_until(canceled, 30)
        assert [t["skill"] for t in tasks] == ["wait"]
        # The session goes on serving after a canceled call.
        result = await session.call_tool("echo", {"task": "still here"})
        assert [c.text for c in result.content if isinstance(c, TextContent)] == ["still here"]


async def test_a_session_answers_only_the_identity_that_opened_it(swarm: Swarm) -> None:
    inst = await swarm.start("web", callers=CALLERS, skills=[ECHO])
    accept = {"Accept": "application/json, text/event-stream"}
    async with inst.session.post(f"{inst.url}/mcp", json=OPENING,
                                 headers={**accept, **inst.headers("gold")}) as resp:
        assert resp.status == 200
        session_id = resp.headers["Mcp-Session-Id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    named = {**accept, "Mcp-Session-Id": session_id, "Mcp-Protocol-Version": "2025-06-18"}
    async with inst.session.post(f"{inst.url}/mcp", json=listing,
                                 headers={**named, **inst.headers("plain")}) as resp:
        assert resp.status == 404  # as if the session never was
        assert (await resp.json())["error"]["message"] == "Session not found"
    async with inst.session.post(f"{inst.url}/mcp", json=listing,
                                 headers={**named, **inst.headers("gold")}) as resp:
        assert resp.status == 200
    async with inst.session.delete(f"{inst.url}/mcp",
                                   headers={**named, **inst.headers("plain")}) as resp:
        assert resp.status == 404  # nor can another identity end it
    async with inst.session.delete(f"{inst.url}/mcp",
                                   headers={**named, **inst.headers("gold")}) as resp:
        assert resp.status == 200
    async with inst.session.post(f"{inst.url}/mcp", json=listing,
                                 headers={**named, **inst.headers("gold")}) as resp:
        assert resp.status == 404  # ended


async def test_an_odd_query_and_a_slow_body_get_clear_answers(swarm: Swarm) -> None:
    """A percent-encoded query that is not Latin-1 reaches the SDK as its raw bytes (it was
    a 500); a body that never finishes is cut off like any other (408)."""
    inst = await swarm.start("web", extra={"server": {"body_timeout_seconds": 0.5}})
    accept = {"Accept": "application/json, text/event-stream", **inst.headers()}
    async with inst.session.post(f"{inst.url}/mcp?x=%E2%82%AC", json=OPENING,
                                 headers=accept) as resp:
        assert resp.status == 200 and resp.headers["Mcp-Session-Id"]
    reader, writer = await asyncio.open_connection("127.0.0.1", inst.daemon.port)
    try:
        head = (f"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n"
                f"Authorization: {inst.headers()['Authorization']}\r\n\r\n{{\"jsonrpc\"")
        writer.write(head.encode())
        async with asyncio.timeout(15):
            answer = await reader.read()
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b'"request_timeout"' in answer


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
    async with inst.session.post(f"{inst.url}/mcp", json=OPENING, headers=accept) as resp:
        assert resp.status == 200  # an opening request with a token gets through
        assert resp.headers["Mcp-Session-Id"]
    # No stream to open outside a call: a GET would otherwise hang until the daemon stops.
    async with inst.session.get(f"{inst.url}/mcp", headers=accept) as resp:
        assert resp.status == 405


_LAZY_SDK = """
import asyncio, sys
from pathlib import Path
import aiohttp
from butler.config import load_config
from butler.daemon import Daemon
from tests.support import ECHO, config_dict, write_config

async def main(tmp):
    cfg, tokens = config_dict(tmp, "lazy", skills=[ECHO])
    daemon = Daemon(load_config(write_config(tmp, "lazy", cfg)))
    await daemon.start()
    try:
        print("at start:", "mcp" in sys.modules)
        headers = {"Authorization": "Bearer " + tokens["operator"],
                   "Accept": "application/json, text/event-stream"}
        async with aiohttp.ClientSession() as http, http.post(
                daemon.url + "/mcp", json=OPENING, headers=headers) as resp:
            print("first request:", resp.status, "mcp" in sys.modules)
    finally:
        await daemon.stop()

OPENING = %r
asyncio.run(main(Path(sys.argv[1])))
"""


def test_the_sdk_is_imported_by_the_first_mcp_request(tmp_path: Path) -> None:
    """The MCP SDK costs a daemon about 35 MB resident: not paid until /mcp is used."""
    run = subprocess.run([sys.executable, "-c", _LAZY_SDK % (OPENING,), str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["at start: False", "first request: 200 True"]


async def test_without_the_sdk_the_daemon_serves_no_mcp_and_says_so(
    swarm: Swarm, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    caplog.set_level(logging.INFO, "butler.mcp")
    inst = await swarm.start("bare", configurations={"mcp_server": {
        "allowed_capabilities": ["echo"]}})
    async with inst.session.post(f"{inst.url}/mcp", json={}, headers=inst.headers()) as resp:
        assert resp.status == 404
    assert [r.getMessage() for r in caplog.records if "/mcp" in r.getMessage()] == [
        "no /mcp: the MCP SDK is not installed (pip install 'butler-a2a[mcp]')"]
