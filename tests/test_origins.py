"""A page on another site cannot use the daemon through a visitor's browser (issue 36): a
``Host`` the daemon does not serve (DNS rebinding) gets 421, a foreign ``Origin`` 403,
in anonymous mode too and on ``/mcp``; the daemon's own names and origin, configured
public hosts and allowed origins pass."""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import pytest

from internal.http import OriginPolicy
from internal.protocol.a2a.client import A2AClient
from internal.protocol.a2a.model import AuthError, DelegationFailed, Identity, RequestError
from tests.support import ECHO, Instance, Swarm

EXTRA = {"public_hosts": ["butler.example.org"], "allowed_origins": ["https://app.example"]}
ADMIN = Identity("test", "admin")
OPENING = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "1"}}}


async def post(inst: Instance, path: str, body: Any, **headers: str) -> tuple[int, Any]:
    async with inst.session.post(inst.url + path, json=body, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


@pytest.fixture
async def anonymous(swarm: Swarm) -> Instance:
    return await swarm.start("home", skills=[ECHO], configurations={
        "a2a": {"anonymous": {"enabled": True}, **EXTRA}})


def test_the_policy() -> None:
    policy = OriginPolicy({"localhost", "butler.example.org"}, ["https://app.example"])
    for host in ("127.0.0.1:8081", "[::1]:80", "LOCALHOST:1", "butler.example.org.", "10.0.0.7"):
        policy.check({"Host": host})
    for origin in ("http://127.0.0.1:8081", "https://app.example"):
        policy.check({"Host": "127.0.0.1:8081", "Origin": origin})
    policy.check({"Host": "butler.example.org", "Origin": "https://butler.example.org:443"})
    with pytest.raises(RequestError) as wrong_host:
        policy.check({"Host": "rebound.attacker.example:8081"})
    assert wrong_host.value.code == "misdirected_request" and wrong_host.value.status == 421
    for origin in ("http://evil.example", "null", "http://127.0.0.1:9999", "garbage"):
        with pytest.raises(AuthError) as refused:
            policy.check({"Host": "127.0.0.1:8081", "Origin": origin})
        assert refused.value.code == "origin_refused" and refused.value.status == 403


async def test_a_rebound_name_and_a_foreign_page_are_refused(anonymous: Instance) -> None:
    task = {"task": "hi", "skill": "echo"}
    port = anonymous.daemon.port
    status, body = await post(anonymous, "/v2/tasks", task, Host=f"rebound.example:{port}")
    assert status == 421 and body["error"]["code"] == "misdirected_request"
    status, body = await post(anonymous, "/v2/tasks", task, Origin="http://evil.example")
    assert status == 403 and body["error"]["code"] == "origin_refused"
    page = await anonymous.daemon.engine.list_tasks(ADMIN, state=None, context_id=None,
                                                    cursor=None, limit=10)
    assert not page.tasks  # nothing was created
    # The daemon's own names and origin, and what the config lists.
    own = f"http://127.0.0.1:{port}"
    for headers in ({"Origin": own},
                    {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"},
                    {"Host": "butler.example.org", "Origin": "https://app.example"}):
        status, body = await post(anonymous, "/v2/tasks", task, **headers)
        assert status == 200 and body["state"] == "completed", headers
    async with anonymous.session.get(anonymous.url + "/healthz",
                                     headers={"Host": "anything"}) as resp:
        assert resp.status == 200  # a load balancer's probe names whatever it likes


async def test_a_card_read_by_a_name_it_does_not_serve_says_why(anonymous: Instance) -> None:
    """Reading a peer's card by a host name it does not answer to (docs/lan.md) names the
    421 and its fix, not a missing card."""
    host = f"office.lan:{anonymous.daemon.port}"
    async with aiohttp.ClientSession(headers={"Host": host}) as session:
        with pytest.raises(DelegationFailed) as refused:
            await A2AClient(anonymous.url, "", session=session, name="office").card(
                time.monotonic() + 10)
    assert "HTTP 421 misdirected_request" in refused.value.message
    assert "public_hosts" in refused.value.message


async def test_mcp_validates_origin(anonymous: Instance) -> None:
    pytest.importorskip("mcp")
    accept = {"Accept": "application/json, text/event-stream"}
    status, body = await post(anonymous, "/mcp", OPENING, Origin="http://evil.example",
                              **accept)
    assert status == 403 and body["error"]["code"] == "origin_refused"
    async with anonymous.session.post(
            anonymous.url + "/mcp", json=OPENING,
            headers={**accept, "Origin": f"http://127.0.0.1:{anonymous.daemon.port}"}) as resp:
        assert resp.status == 200
