"""``butler card URL`` as a real subprocess, against a real Butler, the official a2a-sdk
1.x and 0.3 servers, and a hand-made card that only a pre-0.3 agent would serve."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.delegation_support import serving
from tests.sdk03_support import sdk03_agent
from tests.sdk_agent import sdk_agent
from tests.support import ECHO, Swarm, run_cli


async def test_a_butler_card_without_a_token(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[
        ECHO, {"id": "reader", "builtin": "echo", "capabilities": ["memory.read"],
               "expose": True}])
    # The public card needs no token; BUTLER_TOKEN is set but not sent (unasked).
    code, out, err = await run_cli("card", home.url, token="not-sent")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("home butler  version ")
    assert f"    JSONRPC 1.0  {home.url}/a2a/jsonrpc  <- Butler delegates here" in lines, out
    assert any(line.startswith("    HTTP+JSON 1.0  ") for line in lines), out
    assert any(line.startswith("    JSONRPC 0.3  ") for line in lines), out
    assert "    reader (reader): " in out and "memory.read" in out
    assert "  extensions (1):" in lines and "(required)" not in out
    assert "    bearer: http bearer" in lines and "    required: bearer" in lines
    assert lines[-1] == f"  signature: valid, Ed25519 key {home.daemon.identity.kid}"
    assert "not-sent" not in out + err
    code, out, err = await run_cli("card", home.url, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["name"] == "home butler" and data["supportedInterfaces"]


async def test_a_named_token_variable_must_be_set(swarm: Swarm) -> None:
    home = await swarm.start("home")
    code, _, err = await run_cli("card", home.url, "--token-env", "NO_SUCH_BUTLER_VAR")
    assert code == 1
    assert err.startswith("butler: ") and "NO_SUCH_BUTLER_VAR" in err


async def test_an_sdk_1x_agent() -> None:
    async with sdk_agent("t0k", binding="HTTP+JSON", streaming=False) as agent:
        code, out, err = await run_cli("card", agent.url)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "shouter  version 1.0"
    assert f"    HTTP+JSON 1.0  {agent.url}  <- Butler delegates here" in lines, out
    assert "  streaming: no, push notifications: no, extended card: no" in lines
    assert "    shout (Shout): upper-cases" in lines
    assert "      tags: x" in lines
    assert "  security: none declared" in lines
    assert not agent.seen.headers[0].get("authorization")


async def test_an_sdk_03_agent(sdk03: Path) -> None:
    async with sdk03_agent(sdk03, "t0k") as url:
        code, out, err = await run_cli("card", url)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "shouter 0.3  version 1"
    assert f"    JSONRPC 0.3.0  {url}/  <- Butler delegates here" in lines, out
    assert "    shout (shout): upper case" in lines


@contextlib.asynccontextmanager
async def card_server(card: dict[str, Any] | None) -> AsyncIterator[str]:
    """An agent serving ``card`` only at /.well-known/agent.json (none when ``None``)."""
    async def serve(request: web.Request) -> web.Response:
        return web.json_response(card)

    app = web.Application()
    if card is not None:
        app.router.add_get("/.well-known/agent.json", serve)
    async with serving(app) as url:
        yield url


@pytest.fixture
async def old_agent() -> AsyncIterator[str]:
    """A pre-0.3 card, with a terminal escape in its name and a signature."""
    card: dict[str, Any] = {
        "name": "old\x1b]0;owned\x07 agent", "version": "0.2", "url": "http://127.0.0.1:1/rpc",
        "protocolVersion": "0.2.5", "preferredTransport": "JSONRPC",
        "capabilities": {"extensions": [{"uri": "https://example.org/ext", "required": True}]},
        "securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Key"}},
        "security": [{"key": []}], "skills": "not a list",
        "signatures": [{"protected": "e30", "signature": "c2ln"}]}
    async with card_server(card) as url:
        yield url


async def test_an_old_card_read_leniently_and_without_escapes(old_agent: str) -> None:
    code, out, err = await run_cli("card", old_agent)
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    lines = out.splitlines()
    assert lines[0] == "old ]0;owned  agent  version 0.2"
    # 0.2 is not a version Butler speaks: shown, but nothing is marked.
    assert "    JSONRPC 0.2.5  http://127.0.0.1:1/rpc" in lines
    assert any(line.startswith("    Butler cannot delegate to it") for line in lines)
    assert "  skills (0):" in lines
    assert "    https://example.org/ext (required): " in lines
    assert "    key: apiKey in header X-Key" in lines and "    required: key" in lines
    assert lines[-1].startswith("  signature: INVALID ("), lines[-1]


async def test_no_card_is_one_line() -> None:
    async with card_server(None) as url:
        code, out, err = await run_cli("card", url)
    assert code == 1 and out == ""
    assert err.startswith("butler: peer_error: ") and "HTTP 404" in err
    assert len(err.splitlines()) == 1
