"""Bearer auth against real daemons: 401 / 403 / 400, never 500, and no token in any log."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import ECHO, Instance, ServeProcess, Swarm, config_dict, write_config

V2_ROUTES = [
    ("GET", "/v2/card"), ("POST", "/v2/tasks"), ("GET", "/v2/tasks"),
    ("GET", "/v2/tasks/t1"), ("POST", "/v2/tasks/t1/cancel"), ("POST", "/v2/tasks/t1/input"),
    ("GET", "/v2/tasks/t1/events"), ("GET", "/no/such/route"),
]

GOLD = {"id": "gold-report", "builtin": "echo", "capabilities": ["report"], "expose": True,
        "tier": "gold"}


async def raw_request(inst: Instance, head: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw request bytes (for headers an HTTP client would refuse to send)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", inst.daemon.port)
    try:
        writer.write(head)
        await writer.drain()
        async with asyncio.timeout(5):
            data = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    status_line, _, rest = data.partition(b"\r\n")
    header_block, _, body = rest.partition(b"\r\n\r\n")
    headers = {}
    for line in header_block.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def assert_json_error(body: Any, code: str) -> None:
    assert isinstance(body, dict) and set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


@pytest.mark.parametrize("authorization", [
    None, "", "Bearer", "Bearer ", "Basic b3BlcmF0b3I6cHc=", "Token abc",
    "Bearer not-a-known-token", "Bearer " + "0" * 64,
])
async def test_missing_malformed_or_unknown_token_is_401(
    swarm: Swarm, http: aiohttp.ClientSession, authorization: str | None,
) -> None:
    home = await swarm.start("home")
    headers = {} if authorization is None else {"Authorization": authorization}
    async with http.get(f"{home.url}/v2/card", headers=headers) as resp:
        assert resp.status == 401
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
        assert_json_error(await resp.json(), "unauthenticated")


async def test_every_route_but_the_public_ones_needs_a_token(
    swarm: Swarm, http: aiohttp.ClientSession,
) -> None:
    home = await swarm.start("home")
    for method, path in V2_ROUTES:
        async with http.request(method, home.url + path, json={"task": "x"}) as resp:
            assert resp.status == 401, (method, path)
            assert_json_error(await resp.json(), "unauthenticated")
    async with http.get(f"{home.url}/healthz") as resp:
        assert resp.status == 200


async def test_scheme_is_case_insensitive_and_any_configured_token_works(
    swarm: Swarm, http: aiohttp.ClientSession,
) -> None:
    callers: dict[str, dict[str, Any]] = {f"peer{i}": {} for i in range(5)}
    home = await swarm.start("home", callers=callers)
    for name, token in home.tokens.items():
        async with http.post(f"{home.url}/v2/tasks", json={"task": "hi"},
                             headers={"Authorization": f"bearer {token}"}) as resp:
            assert resp.status == 200
            body = await resp.json()
        # The handler got this token's identity: a bound peer is the caller in the chain.
        assert body["swarm"]["caller_chain"] == [name]


async def test_tasks_belong_to_the_caller_identity(
    swarm: Swarm, http: aiohttp.ClientSession,
) -> None:
    home = await swarm.start("home", callers={"operator": {}, "office": {},
                                              "root": {"tier": "admin"}})
    async with http.post(f"{home.url}/v2/tasks", json={"task": "mine"},
                         headers=home.headers("office")) as resp:
        task_id = (await resp.json())["id"]
    for who, status in (("office", 200), ("operator", 404), ("root", 200)):
        async with http.get(f"{home.url}/v2/tasks/{task_id}", headers=home.headers(who)) as resp:
            assert resp.status == status, who


async def test_bound_token_cannot_claim_another_caller(
    swarm: Swarm, http: aiohttp.ClientSession,
) -> None:
    home = await swarm.start("home", callers={"office": {}, "script": {"bound": False}})
    forged = {"task": "hi", "caller_chain": ["mallory"]}
    async with http.post(f"{home.url}/v2/tasks", json=forged,
                         headers=home.headers("office")) as resp:
        assert resp.status == 403
        assert_json_error(await resp.json(), "chain_mismatch")
    # Header form of the envelope, same rule.
    async with http.post(f"{home.url}/v2/tasks", json={"task": "hi"},
                         headers={**home.headers("office"), "X-Swarm-Agent-Chain": "mallory"}
                         ) as resp:
        assert resp.status == 403
    relayed = {"task": "hi", "caller_chain": ["laptop", "office"]}
    async with http.post(f"{home.url}/v2/tasks", json=relayed,
                         headers=home.headers("office")) as resp:
        assert resp.status == 200
        assert (await resp.json())["swarm"]["caller_chain"] == ["laptop", "office"]
    # A token bound to no name may relay any chain.
    async with http.post(f"{home.url}/v2/tasks", json=forged,
                         headers=home.headers("script")) as resp:
        assert resp.status == 200


async def test_tier_restricted_skill_is_hidden_from_other_tiers(
    swarm: Swarm, http: aiohttp.ClientSession,
) -> None:
    home = await swarm.start("home", skills=[ECHO, GOLD], callers={
        "operator": {}, "gold": {"tier": "gold"}, "root": {"tier": "admin"}})
    for who, sees in (("operator", False), ("gold", True), ("root", True)):
        async with http.get(f"{home.url}/v2/card", headers=home.headers(who)) as resp:
            card = await resp.json()
        assert ("gold-report" in [s["id"] for s in card["skills"]]) is sees, who
        assert ("report" in card["capabilities"]) is sees, who
    async with http.post(f"{home.url}/v2/tasks", json={"task": "x", "skill": "gold-report"},
                         headers=home.headers("operator")) as resp:
        body = await resp.json()
    assert body.get("state") != "completed" and body.get("output") != "x", body
    async with http.post(f"{home.url}/v2/tasks", json={"task": "x", "skill": "gold-report"},
                         headers=home.headers("gold")) as resp:
        assert (await resp.json())["state"] == "completed"


async def test_tier_restricted_skill_request_is_403(
    swarm: Swarm, http: aiohttp.ClientSession,
) -> None:
    home = await swarm.start("home", skills=[ECHO, GOLD])
    async with http.post(f"{home.url}/v2/tasks", json={"task": "x", "skill": "gold-report"},
                         headers=home.headers()) as resp:
        assert resp.status == 403
        assert (await resp.json())["error"]["code"] == "forbidden"


async def test_odd_authorization_headers_are_4xx_never_500(swarm: Swarm) -> None:
    home = await swarm.start("home")
    token = home.tokens["operator"].encode()
    head = b"GET /v2/card HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: "
    cases = [
        ("Bearer tökén".encode(), 401, "unauthenticated"),            # UTF-8, non-ASCII
        (b"Bearer t\xf6k\xe9n", 401, "unauthenticated"),               # not even UTF-8
        (b"Bearer " + token + "é".encode(), 401, "unauthenticated"),
        (b"Bearer " + token + b"x" * 5000, 400, "header_too_large"),  # our own cap
        (b"Bearer " + token + b"x" * 9000, 400, "header_too_large"),  # the parser's cap
        (b"Bearer " + token + b"\x01", 400, "invalid_request"),        # control character
    ]
    for value, status, code in cases:
        got, headers, body = await raw_request(home, head + value + b"\r\n\r\n")
        assert got == status, value[:40]
        assert headers["content-type"].startswith("application/json")
        assert_json_error(json.loads(body), code)
        assert token not in body, "an error must not echo the token back"
        if status == 401:
            assert headers["www-authenticate"].startswith("Bearer")


async def test_tokens_never_reach_the_log(tmp_path: Path) -> None:
    cfg, tokens = config_dict(tmp_path, "home", callers={"operator": {}})
    cfg["logging"] = {"level": "debug"}
    log_path = tmp_path / "home.log"
    server = await ServeProcess.start(write_config(tmp_path, "home", cfg), log_path)
    token = tokens["operator"]
    auth = {"Authorization": f"Bearer {token}"}
    try:
        async with aiohttp.ClientSession() as http:
            requests: list[tuple[str, str, dict[str, Any]]] = [
                ("GET", "/v2/card", {"headers": auth}),
                ("POST", "/v2/tasks", {"headers": auth, "json": {"task": "hi"}}),
                ("POST", "/v2/tasks", {"headers": auth, "data": b"{not json",
                                       "skip_auto_headers": ["Content-Type"]}),
                ("GET", "/v2/tasks/nope", {"headers": auth}),
                ("GET", f"/v2/card?token={token}", {"headers": auth}),
                ("GET", "/v2/card", {"headers": {"Authorization": f"Bearer {token}x"}}),
                ("GET", "/v2/card", {"headers": {"Authorization": f"Basic {token}"}}),
                ("GET", "/v2/card", {"headers": {"Authorization": f"Bearer {token} junk"}}),
                ("GET", "/v2/card", {"headers": {"Authorization": f"Bearer {token}{'x' * 5000}"}}),
                ("GET", "/v2/card", {"headers": {"X-Api-Key": token}}),
            ]
            for method, path, kwargs in requests:
                async with http.request(method, server.url + path, **kwargs) as resp:
                    assert resp.status < 500
            # Past the parser's header limit: the parser's own error path.
            reader, writer = await asyncio.open_connection(*server.url[7:].split(":"))
            writer.write(b"GET /v2/card HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                         + token.encode() + b"x" * 9000 + b"\r\n\r\n")
            async with asyncio.timeout(5):
                assert (await reader.read()).startswith(b"HTTP/1.")
            writer.close()
            await writer.wait_closed()
    finally:
        assert await server.stop() == 0
    log = log_path.read_text()
    assert "level=debug" in log, "debug logging was on, so the check below means something"
    assert token not in log
    assert token[:16] not in log
