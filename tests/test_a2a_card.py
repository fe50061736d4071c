"""The A2A agent card: the well-known URL (public, cached) and the extended card."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
from a2a.client.card_resolver import parse_agent_card
from a2a.compat.v0_3 import types as v03
from a2a.types import AgentCard, GetExtendedAgentCardRequest
from google.protobuf import json_format

from tests.a2a_support import JSONRPC, rpc, sdk_client
from tests.sdk03_support import run_client
from tests.support import ECHO, Swarm

WELL_KNOWN = "/.well-known/agent-card.json"
SWARM_URI = "urn:butler:a2a:ext:swarm:v1"


def skill(skill_id: str, *caps: str, **extra: Any) -> dict[str, Any]:
    return {"id": skill_id, "builtin": "echo", "capabilities": list(caps), "expose": True,
            **extra}


async def fetch(http: aiohttp.ClientSession, url: str,
                headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    async with http.get(url + WELL_KNOWN, headers=headers or {}) as resp:
        body = await resp.json() if resp.status == 200 else None
        return resp.status, resp.headers, body


async def test_well_known_card_is_a_public_a2a_1_0_card(
    swarm: Swarm, http: aiohttp.ClientSession,
) -> None:
    home = await swarm.start("home", skills=[
        {**ECHO, "name": "Echo", "description": "says it back", "tags": ["util"],
         "examples": ["hello"]},
        skill("secret", "secret.cap", tier="gold"), skill("hidden", "h", expose=False)])
    status, headers, card = await fetch(http, home.url)
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert card["name"] == "home butler" and card["version"] and card["description"]
    assert {(i["protocolBinding"], i["protocolVersion"], i["url"])
            for i in card["supportedInterfaces"]} == {
        ("JSONRPC", "1.0", home.url + JSONRPC), ("HTTP+JSON", "1.0", home.url),
        ("JSONRPC", "0.3", home.url + JSONRPC)}
    caps = card["capabilities"]
    assert caps["streaming"] is True and caps["pushNotifications"] is True
    assert caps["extendedAgentCard"] is True
    assert [e["uri"] for e in caps["extensions"]] == [SWARM_URI]
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]
    assert card["defaultInputModes"] and card["defaultOutputModes"]
    # Anonymous callers see only untiered, exposed skills.
    assert card["skills"] == [{"id": "echo", "name": "Echo", "description": "says it back",
                               "tags": ["util", "echo"], "examples": ["hello"],
                               "inputModes": ["*/*"]}]
    # The official SDK reads it, and picks the 1.0 interfaces.
    parsed = parse_agent_card(dict(card))
    assert parsed.name == "home butler" and parsed.capabilities.streaming
    assert [s.id for s in parsed.skills] == ["echo"]


async def test_card_caching_headers(swarm: Swarm, http: aiohttp.ClientSession) -> None:
    home = await swarm.start("home")
    status, headers, _ = await fetch(http, home.url)
    etag, modified = headers["ETag"], headers["Last-Modified"]
    assert status == 200 and etag.startswith('"') and "max-age=" in headers["Cache-Control"]
    status, again, body = await fetch(http, home.url, {"If-None-Match": etag})
    assert status == 304 and body is None and again["ETag"] == etag
    status, _, _ = await fetch(http, home.url, {"If-None-Match": '"other"'})
    assert status == 200
    status, _, _ = await fetch(http, home.url, {"If-Modified-Since": modified})
    assert status == 304


async def test_the_card_follows_the_skills_it_lists(swarm: Swarm,
                                                   http: aiohttp.ClientSession) -> None:
    """The encoded card is kept while its facts stay the same, and only so long: a skill
    that arrives later (an MCP server's tool) is on the next card, with a new ETag."""
    home = await swarm.start("home")
    _, first, card = await fetch(http, home.url)
    _, again, same = await fetch(http, home.url)
    assert again["ETag"] == first["ETag"] and same == card
    echo = home.daemon.catalog.find("echo")
    assert echo is not None
    home.daemon.catalog.provide("late", [replace(echo, config=replace(echo.config,
                                                                      id="late.echo"))])
    _, later, changed = await fetch(http, home.url)
    assert later["ETag"] != first["ETag"]
    assert [s["id"] for s in changed["skills"]] == ["echo", "late.echo"]
    assert changed["signatures"] != card["signatures"]


async def test_legacy_0_3_fields_are_switchable(swarm: Swarm, http: aiohttp.ClientSession,
                                                ) -> None:
    home = await swarm.start("home")
    _, _, card = await fetch(http, home.url)
    assert card["url"] == home.url + JSONRPC and card["preferredTransport"] == "JSONRPC"
    assert card["protocolVersion"] == "0.3.0" and card["supportsAuthenticatedExtendedCard"]
    legacy = v03.AgentCard.model_validate(card)  # what a 0.3 client reads
    assert legacy.url == home.url + JSONRPC and legacy.security == [{"bearer": []}]
    office = await swarm.start("office", configurations={"a2a": {"legacy_v03_card": False}})
    _, _, card = await fetch(http, office.url)
    assert not {"url", "preferredTransport", "protocolVersion"} & set(card)


async def test_extended_card_shows_the_callers_tier(swarm: Swarm) -> None:
    home = await swarm.start(
        "home", callers={"operator": {}, "vip": {"tier": "gold"}},
        skills=[ECHO, skill("secret", "secret.cap", tier="gold")])
    async with sdk_client(home, "vip") as client:
        card = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
        assert sorted(s.id for s in card.skills) == ["echo", "secret"]
    status, body = await rpc(home, "GetExtendedAgentCard", {})
    assert status == 200 and [s["id"] for s in body["result"]["skills"]] == ["echo"]
    status, body = await rpc(home, "GetExtendedAgentCard", {}, who="vip")
    assert sorted(s["id"] for s in body["result"]["skills"]) == ["echo", "secret"]


V03_ONLY = {"url", "preferredTransport", "additionalInterfaces", "security", "protocolVersion",
            "supportsAuthenticatedExtendedCard"}


async def test_the_extended_card_answers_in_its_bindings_version(swarm: Swarm) -> None:
    """CARD-EXT-001: ``GetExtendedAgentCard`` is a 1.0 method, over JSON-RPC and HTTP+JSON:
    1.0 fields alone (protobuf's strict parser takes it); 0.3's
    ``agent/getAuthenticatedExtendedCard`` answers in the 0.3 shape alone."""
    home = await swarm.start("home", skills=[ECHO])
    status, body = await rpc(home, "GetExtendedAgentCard", {})
    assert status == 200 and not V03_ONLY & set(body["result"]), body
    json_format.ParseDict(body["result"], AgentCard())
    async with home.session.get(home.url + "/extendedAgentCard",
                                headers={**home.headers(), "A2A-Version": "1.0"}) as resp:
        assert resp.status == 200
        card = await resp.json()
    assert not V03_ONLY & set(card)
    json_format.ParseDict(card, AgentCard())
    status, body = await rpc(home, "agent/getAuthenticatedExtendedCard", None, version="0.3")
    assert status == 200 and "supportedInterfaces" not in body["result"], body
    legacy = v03.AgentCard.model_validate(body["result"])
    assert legacy.protocol_version == "0.3.0"


async def test_a_1_0_client_gets_a_clean_1_0_card(swarm: Swarm, http: aiohttp.ClientSession,
                                                  ) -> None:
    """``A2A-Version: 1.0`` (what 1.0 clients send) negotiates a card without any 0.3 field:
    protobuf's strict ParseDict (no ignore_unknown_fields) accepts it."""
    home = await swarm.start("home", skills=[ECHO])
    status, headers, card = await fetch(http, home.url, {"A2A-Version": "1.0"})
    assert status == 200 and headers["Vary"] == "A2A-Version"
    assert not V03_ONLY & set(card)
    assert card["securitySchemes"] == {"bearer": {"httpAuthSecurityScheme": {
        "scheme": "Bearer", "description": card["securitySchemes"]["bearer"][
            "httpAuthSecurityScheme"]["description"]}}}
    strict = json_format.ParseDict(card, AgentCard())
    assert strict.name == "home butler" and [s.id for s in strict.skills] == ["echo"]
    _, _, default = await fetch(http, home.url)
    assert set(default) >= V03_ONLY and default["supportedInterfaces"] == card[
        "supportedInterfaces"]
    _, _, legacy = await fetch(http, home.url, {"A2A-Version": "0.3"})
    assert v03.AgentCard.model_validate(legacy).url == home.url + JSONRPC
    assert "supportedInterfaces" not in legacy


async def test_the_a2a_sdk_0_3_client_reads_the_card_and_sends(swarm: Swarm, sdk03: Path,
                                                               ) -> None:
    home = await swarm.start("home", skills=[ECHO])
    for scenario in ("send", "stream"):
        seen = await run_client(sdk03, home.url, home.tokens["operator"], scenario)
        assert "error" not in seen, seen
        assert seen["card_url"] == home.url + JSONRPC and seen["protocol_version"] == "0.3.0"
        assert seen["state"] == "completed" and seen["texts"] == ["hello"]
