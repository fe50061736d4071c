"""Anonymous mode (``configurations.a2a.anonymous``): for local A2A inspectors and test
kits that cannot send a token. Off by default, refused beyond loopback, its own tier,
a warning at start-up."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory

from tests.a2a_support import send_request, send_task, text, user_message
from tests.support import ECHO, REPO, Swarm, child_env

GOLD = {"id": "gold", "builtin": "echo", "capabilities": ["gold"], "expose": True,
        "tier": "gold"}
ANONYMOUS = {"a2a": {"anonymous": {"enabled": True}}}


async def test_a_loopback_daemon_in_anonymous_mode_takes_calls_without_a_token(
        swarm: Swarm, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="butler.daemon")
    home = await swarm.start("home", skills=[ECHO, GOLD], configurations=ANONYMOUS)
    assert any("anonymous callers allowed" in r.getMessage() for r in caplog.records)
    async with httpx.AsyncClient(timeout=20) as http:  # no Authorization at all
        for binding in ("JSONRPC", "HTTP+JSON"):
            config = ClientConfig(httpx_client=http, streaming=False,
                                  supported_protocol_bindings=[binding])
            client = await ClientFactory(config).create_from_url(home.url)
            try:
                task = await send_task(client, send_request(user_message(text("hi"))))
            finally:
                await client.close()
            assert task.artifacts[-1].parts[0].text == "hi", binding
    async with home.session.get(home.url + "/v2/card") as resp:
        card: dict[str, Any] = await resp.json()
    assert resp.status == 200 and [s["id"] for s in card["skills"]] == ["echo"]  # no tier
    async with home.session.post(home.url + "/v2/tasks", json={
            "task": "x", "capabilities_needed": ["gold"]}) as resp:
        refused = await resp.json()
    assert resp.status == 200 and refused["state"] == "failed", refused
    assert refused["error"]["code"] == "no_capable_skill"  # the gold tier's skill is hidden
    bad = {"Authorization": "Bearer not-a-token"}
    async with home.session.get(home.url + "/v2/card", headers=bad) as resp:
        assert resp.status == 401  # a wrong token is still wrong


async def test_anonymous_mode_is_off_by_default(swarm: Swarm) -> None:
    home = await swarm.start("home")
    async with home.session.get(home.url + "/v2/card") as resp:
        assert resp.status == 401


async def test_anonymous_mode_is_refused_beyond_loopback(tmp_path: Path) -> None:
    path = tmp_path / "lan.yaml"
    path.write_text("configurations:\n  a2a: {enabled: true, bind_address: 0.0.0.0, "
                    "anonymous: {enabled: true}}\n")
    for args in (("check-config", str(path)), ("serve", "-c", str(path))):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "butler", *args, cwd=REPO, env=child_env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        async with asyncio.timeout(20):
            _, err = await proc.communicate()
        lines = err.decode().strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, err
        assert "configurations.a2a.anonymous" in lines[0] and "loopback" in lines[0]
