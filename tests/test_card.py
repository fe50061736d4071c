"""GET /v2/card on a real daemon (``butler card`` is in test_card_cli.py)."""

from __future__ import annotations

import socket
import sys
from datetime import datetime
from typing import Any

import aiohttp
import pytest

from butler.skills import command
from tests.support import ECHO, Instance, Swarm, command_skill, plugin_skill

CARD_KEYS = {"name", "description", "url", "version", "capabilities", "skills",
             "auth_schemes", "streaming", "updated_at"}


def skill(skill_id: str, *caps: str, **extra: Any) -> dict[str, Any]:
    return {"id": skill_id, "builtin": "echo", "capabilities": list(caps), "expose": True,
            **extra}


async def card(http: aiohttp.ClientSession, inst: Instance, who: str = "operator"
               ) -> dict[str, Any]:
    async with http.get(f"{inst.url}/v2/card", headers=inst.headers(who)) as resp:
        assert resp.status == 200
        data: dict[str, Any] = await resp.json()
        return data


async def test_card_fields(swarm: Swarm, http: aiohttp.ClientSession) -> None:
    home = await swarm.start("home", skills=[ECHO])
    data = await card(http, home)
    assert set(data) >= CARD_KEYS
    assert data["name"] == "home butler"
    assert data["url"] == home.url
    assert isinstance(data["description"], str) and data["version"]
    assert data["auth_schemes"] == ["bearer"]
    assert isinstance(data["streaming"], bool)
    assert datetime.fromisoformat(data["updated_at"].replace("Z", "+00:00"))
    assert data["capabilities"] == ["echo"]
    assert [s["id"] for s in data["skills"]] == ["echo"]
    # The intent router's stages here (issue 35): semantic only with the extra installed.
    assert data["swarm"]["routing_stages"] in (["lexical", "ngrams"],
                                               ["lexical", "ngrams", "semantic"])
    async with http.get(f"{home.url}/v2/card") as resp:
        assert resp.status == 401


async def test_allowed_capabilities_limit_what_is_advertised(
    swarm: Swarm, http: aiohttp.ClientSession,
) -> None:
    home = await swarm.start(
        "home",
        skills=[ECHO, skill("reader", "memory.read"), skill("writer", "memory.write"),
                skill("data", "data.read", "data.write")],
        configurations={"mcp_server": {"allowed_capabilities": ["memory.read", "data.read"]}},
    )
    data = await card(http, home)
    assert sorted(data["capabilities"]) == ["data.read", "memory.read"]
    skills = {s["id"]: s["capabilities"] for s in data["skills"]}
    # A skill that provides an allowed capability shows only the allowed ones.
    assert skills == {"reader": ["memory.read"], "data": ["data.read"]}


async def test_unexposed_and_reserved_skills_never_appear(
    swarm: Swarm, http: aiohttp.ClientSession,
) -> None:
    home = await swarm.start(
        "home",
        callers={"operator": {}, "root": {"tier": "admin"}},
        skills=[ECHO, skill("hidden", "hidden.cap", expose=False),
                skill("a2a.delegate", "a2a.delegate"), skill("butler.reload", "butler.reload"),
                skill("admin.shutdown", "admin.shutdown"),
                skill("tools", "tools.run", "admin.reset")],
    )
    for who in ("operator", "root"):
        data = await card(http, home, who)
        assert sorted(s["id"] for s in data["skills"]) == ["echo", "tools"], who
        assert sorted(data["capabilities"]) == ["echo", "tools.run"], who
        tools = next(s for s in data["skills"] if s["id"] == "tools")
        assert tools["capabilities"] == ["tools.run"]


async def test_each_skill_shows_its_runner_fidelity_and_its_input_schema(
    swarm: Swarm, http: aiohttp.ClientSession,
) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    home = await swarm.start("home", skills=[
        ECHO, plugin_skill("about", "tests.plugins.sample:about", input_schema=schema),
        command_skill("count", [sys.executable, "-c", "print('1')"]),
    ])
    skills = {s["id"]: s for s in (await card(http, home))["skills"]}
    lossless = {"level": "lossless", "caveats": []}
    assert skills["echo"]["bridge_fidelity"] == lossless
    assert skills["about"]["bridge_fidelity"] == lossless
    assert skills["count"]["bridge_fidelity"] == {
        "level": "adapted", "caveats": list(command.FIDELITY.caveats)}
    assert "no input-required" in skills["count"]["bridge_fidelity"]["caveats"]
    assert skills["about"]["input_schema"] == schema
    assert "input_schema" not in skills["echo"]
    # Neither has a field on A2A's AgentSkill: the A2A card stays the standard one.
    async with http.get(f"{home.url}/.well-known/agent-card.json",
                        headers={"A2A-Version": "1.0"}) as resp:
        a2a = await resp.json()
    about = next(s for s in a2a["skills"] if s["id"] == "about")
    assert not {"input_schema", "inputSchema", "bridge_fidelity", "bridgeFidelity"} & set(about)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
async def test_ipv6_bind_gives_a_usable_url(swarm: Swarm, http: aiohttp.ClientSession) -> None:
    """Regression: the URL was http://::1:PORT, which no client can parse."""
    home = await swarm.start("home", configurations={"a2a": {"bind_address": "::1"}})
    assert home.url == f"http://[::1]:{home.daemon.port}"
    assert (await card(http, home))["url"] == home.url
