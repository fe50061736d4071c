"""One rule set on every entry point (issue 36): a call that ``/v2`` refuses for its caller
chain, depth or budget is refused the same over ``/mcp`` and stdio (gRPC:
tests/test_a2a_grpc.py, ``test_a_loop_in_the_metadata_chain_is_refused``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from internal.protocol.a2a.codec.swarm_envelope import SWARM_EXTENSION_URI
from tests.support import ECHO, Instance, Swarm, post_task
from tests.test_stdio import _message, stdio_butler

DEEP = ["a1", "a2", "a3"]  # deeper than max_depth 2
SWARM = {"max_depth": 2}


@asynccontextmanager
async def mcp_session(inst: Instance, who: str, **headers: str) -> AsyncIterator[Any]:
    httpx2 = pytest.importorskip("httpx2")
    pytest.importorskip("mcp")
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={**inst.headers(who), **headers}) as client, \
            streamable_http_client(f"{inst.url}/mcp", http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def tool_code(inst: Instance, who: str, **headers: str) -> str | None:
    async with mcp_session(inst, who, **headers) as session:
        result = await session.call_tool("echo", {"task": "hi"})
    return result.structured_content.get("code") if result.is_error else None


async def test_mcp_enforces_chain_and_depth_as_v2_does(swarm: Swarm) -> None:
    pytest.importorskip("mcp")
    home = await swarm.start("home", skills=[ECHO], swarm=SWARM,
                             callers={"operator": {"bound": False}, "office": {}})
    deep = {"X-Swarm-Agent-Chain": ",".join(DEEP), "X-Swarm-Depth": "3"}
    status, body = await post_task(home, {"task": "hi", "skill": "echo",
                                          "caller_chain": DEEP})
    assert status == 422 and body["error"]["code"] == "depth_exceeded"
    assert await tool_code(home, "operator", **deep) == "depth_exceeded"
    # A bound caller must be the chain's last hop (403 chain_mismatch on /v2).
    assert await tool_code(home, "office", **{"X-Swarm-Agent-Chain": "a1"}) == "chain_mismatch"
    assert await tool_code(home, "office", **{"X-Swarm-Agent-Chain": "office"}) is None
    # A depth that is not the chain's length is a malformed envelope: 400 before the SDK.
    async with home.session.post(f"{home.url}/mcp", json={}, headers={
            **home.headers(), "X-Swarm-Agent-Chain": "a1", "X-Swarm-Depth": "5"}) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"]["code"] == "invalid_envelope"


async def test_stdio_enforces_the_envelope_in_metadata(tmp_path: Path) -> None:
    async with stdio_butler(tmp_path, configurations={"swarm": SWARM}) as butler:
        await butler.send(1, "SendMessage", _message("hi", metadata={
            SWARM_EXTENSION_URI: {"callerChain": DEEP, "depth": 3}}))
        answer = await butler.answer(1)
        assert answer["error"]["data"][0]["metadata"]["code"] == "depth_exceeded", answer
