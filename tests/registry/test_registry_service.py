"""The HTTP API against a real server on 127.0.0.1 port 0, over both stores."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from butler.registry.clock import ManualClock
from butler.registry.config import RegistryServiceConfig
from butler.registry.service import build_registry_app
from butler.registry.store import Query, RegistryStore
from tests.registry.registry_support import auth, config, make_card
from tests.support import wait_until

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[..., Awaitable[Client]]
FULLWIDTH = "\uff4f\uff46\uff46\uff49\uff43\uff45"


@pytest.fixture
def start(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]],
    store: RegistryStore, clock: ManualClock,
) -> Callable[..., Awaitable[Client]]:
    async def go(**overrides: Any) -> Client:
        return await aiohttp_client(build_registry_app(config(**overrides), store, clock))
    return go


async def put(client: Client, name: str, who: str = "alice", **body: Any) -> Any:
    body.setdefault("card", make_card())
    return await client.put(f"/v1/agents/{name}", json=body, headers=auth(who))


async def error_code(resp: Any) -> str:
    data = await resp.json()
    return str(data["error"]["code"])


async def test_auth_is_required_except_for_healthz(start: MakeClient) -> None:
    client = await start()
    assert (await client.get("/healthz")).status == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
        resp = await client.get("/v1/agents", headers=headers)
        assert resp.status == 401
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
        assert await error_code(resp) == "unauthenticated"
    resp = await client.put("/v1/agents/office", json={"card": make_card()})
    assert resp.status == 401


async def test_register_refresh_get_find_delete(start: MakeClient, clock: ManualClock) -> None:
    client = await start()
    resp = await put(client, "Office", ttl_seconds=60)
    assert resp.status == 201
    body = await resp.json()
    assert body["name"] == "office" and body["owner"] == "alice"
    assert body["url"] == "http://127.0.0.1:8081" and body["expires_in_seconds"] == 60
    assert (await put(client, "office", url="https://office.example")).status == 200

    resp = await client.get(f"/v1/agents/{FULLWIDTH}", headers=auth("bob"))
    assert resp.status == 200
    assert (await resp.json())["url"] == "https://office.example"

    resp = await client.get("/v1/agents", params={"capability": "Memory.Search"},
                            headers=auth("bob"))
    page = await resp.json()
    assert [a["name"] for a in page["agents"]] == ["office"] and page["next_cursor"] is None

    clock.advance(100)
    beat = await client.post("/v1/agents/office/heartbeat", headers=auth("alice"))
    assert beat.status == 200
    assert (await beat.json())["expires_in_seconds"] == 300
    resp = await client.delete("/v1/agents/office", headers=auth("alice"))
    assert resp.status == 204
    assert (await client.get("/v1/agents/office", headers=auth("alice"))).status == 404
    resp = await client.delete("/v1/agents/office", headers=auth("alice"))
    assert resp.status == 404


async def test_query_filters_and_pagination(start: MakeClient) -> None:
    client = await start(max_page_size=5)
    for i in range(12):
        assert (await put(client, f"agent-{i:02d}")).status == 201
    translate = [{"id": "translate", "name": "Translate", "description": "Kitchen French",
                  "capabilities": ["text.translate"], "tags": ["language"]}]
    await put(client, "home", card=make_card("Home", caps=(), skills=translate))
    for params, expected in (
        ({"skill": "translate"}, ["home"]), ({"tag": "Language"}, ["home"]),
        ({"q": "kitchen french"}, ["home"]), ({"capability": "text.translate"}, ["home"]),
        ({"q": "no such words"}, []),
    ):
        resp = await client.get("/v1/agents", params=params, headers=auth("bob"))
        assert [a["name"] for a in (await resp.json())["agents"]] == expected, params

    seen: list[str] = []
    params = {"capability": "memory.search"}
    while True:
        resp = await client.get("/v1/agents", params=params, headers=auth("bob"))
        page = await resp.json()
        assert len(page["agents"]) <= 5
        seen += [a["name"] for a in page["agents"]]
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]
    assert seen == [f"agent-{i:02d}" for i in range(12)]


@pytest.mark.parametrize("query", [
    "limit=0", "limit=6", "limit=x", "limit=\uff11", "cursor=!!!", "cursor=b2ZmaWNlIQ",
    "colour=red", "capability=a&capability=b", "capability=has%20space", "q=a%00b",
    "tag=%0a",
])
async def test_bad_queries_are_400(start: MakeClient, query: str) -> None:
    client = await start(max_page_size=5)
    resp = await client.get(f"/v1/agents?{query}", headers=auth("alice"))
    assert resp.status == 400, query
    assert await error_code(resp) == "invalid_request"


async def test_ownership_across_look_alike_names(start: MakeClient) -> None:
    client = await start()
    assert (await put(client, "office")).status == 201
    for name in ("office", "OFFICE", FULLWIDTH):
        resp = await put(client, name, "bob", card=make_card("Evil"))
        assert resp.status == 403 and await error_code(resp) == "name_owned"
    assert (await client.delete("/v1/agents/Office", headers=auth("bob"))).status == 403
    beat = await client.post("/v1/agents/office/heartbeat", headers=auth("bob"))
    assert beat.status == 403
    resp = await client.get("/v1/agents/office", headers=auth("bob"))
    assert (await resp.json())["display_name"] == "Office"
    # The admin tier may remove any name.
    assert (await client.delete("/v1/agents/office", headers=auth("root"))).status == 204


async def test_cap_on_names_is_403(start: MakeClient) -> None:
    client = await start(max_names_per_identity=2)
    assert (await put(client, "a")).status == 201
    assert (await put(client, "b")).status == 201
    resp = await put(client, "c")
    assert resp.status == 403
    assert (await resp.json())["error"]["details"] == {"limit": 2}
    assert (await put(client, "b")).status == 200


def _bad_requests() -> list[tuple[str, str, dict[str, str], bytes, int]]:
    good = json.dumps({"card": make_card()}).encode()
    big = json.dumps({"card": make_card(description="x" * 8000)}).encode()
    huge = json.dumps({"card": make_card(description="x" * 80_000)}).encode()
    js = {"Content-Type": "application/json"}
    return [
        ("PUT", "/v1/agents/mallory", js, b"{not json", 400),
        ("PUT", "/v1/agents/mallory", js, b"", 400),
        ("PUT", "/v1/agents/mallory", js, b"[1, 2]", 400),
        ("PUT", "/v1/agents/mallory", js, b'{"url": "http://h"}', 400),
        ("PUT", "/v1/agents/mallory", js, b'{"card": {"name": "x"}, "extra": 1}', 400),
        ("PUT", "/v1/agents/mallory", js, b'{"card": {"name": "x", "evil": 1}}', 400),
        ("PUT", "/v1/agents/mallory", js, b'{"card": {"name": "x"}}', 400),  # no URL at all
        ("PUT", "/v1/agents/mallory", js,
         b'{"card": {"name": "x"}, "url": "http://u:p@h"}', 400),
        ("PUT", "/v1/agents/mallory", js, good[:-1] + b', "ttl_seconds": 1}', 400),
        ("PUT", "/v1/agents/mallory", js, good[:-1] + b', "ttl_seconds": 1e999999999}', 400),
        ("PUT", "/v1/agents/mallory", js, good[:-1] + b', "ttl_seconds": "60"}', 400),
        ("PUT", "/v1/agents/mallory", js, b"[" * 100 + b"]" * 100, 400),
        ("PUT", "/v1/agents/mallory", {"Content-Type": "text/plain"}, good, 415),
        ("PUT", "/v1/agents/mallory", js, big, 413),
        ("PUT", "/v1/agents/mallory", js, huge, 413),
        ("PUT", "/v1/agents/mal%00lory", js, good, 400),
        ("PUT", "/v1/agents/mal%0Alory", js, good, 400),
        ("PUT", "/v1/agents/mal%E2%80%8Blory", js, good, 400),
        ("PUT", "/v1/agents/%D0%BEffice", js, good, 400),
        ("PUT", "/v1/agents/" + "a" * 65, js, good, 400),
        ("POST", "/v1/agents/office/heartbeat", js, b'{"ttl_seconds": 99999}', 400),
        ("POST", "/v1/agents/office/heartbeat", js, b'{"card": {}}', 400),
        ("PATCH", "/v1/agents/office", js, good, 405),
    ]


@pytest.mark.parametrize(("method", "path", "headers", "body", "status"), _bad_requests())
async def test_bad_input_is_a_clear_4xx_and_changes_nothing(
    start: MakeClient, store: RegistryStore, clock: ManualClock,
    method: str, path: str, headers: dict[str, str], body: bytes, status: int,
) -> None:
    client = await start(max_card_bytes=4096)
    assert (await put(client, "office")).status == 201
    before = await store.query(Query(), now=clock.now(), limit=100)
    resp = await client.request(method, path, data=body, headers={**headers, **auth("alice")})
    assert resp.status == status
    error = (await resp.json())["error"]
    assert error["code"] and error["message"]
    assert await store.query(Query(), now=clock.now(), limit=100) == before


async def test_flood_of_writes_is_rate_limited_per_identity(
    start: MakeClient, clock: ManualClock
) -> None:
    client = await start(max_writes_per_minute=5)
    statuses = [(await put(client, f"a{i}")).status for i in range(5)]
    assert statuses == [201] * 5
    loop = asyncio.get_running_loop()
    began = loop.time()
    resp = await put(client, "a5")
    assert resp.status == 429
    assert int(resp.headers["Retry-After"]) >= 1
    assert loop.time() - began >= 0.9  # held (refusal_hold_seconds, 1 s) before it came
    assert await error_code(resp) == "rate_limited"
    bad = await client.put("/v1/agents/a6", data=b"junk", headers=auth("alice"))
    assert bad.status == 429  # malformed writes are charged too
    assert (await put(client, "b0", "bob")).status == 201
    listing = await client.get("/v1/agents", headers=auth("alice"))
    assert len((await listing.json())["agents"]) == 6  # reads are not limited
    clock.advance(12)
    assert (await put(client, "a5")).status == 201


async def test_ttl_through_the_api(start: MakeClient, clock: ManualClock) -> None:
    client = await start()
    await put(client, "office", ttl_seconds=30)
    clock.advance(29.5)
    assert (await client.get("/v1/agents/office", headers=auth("bob"))).status == 200
    clock.advance(0.5)
    assert (await client.get("/v1/agents/office", headers=auth("bob"))).status == 404
    listing = await client.get("/v1/agents", headers=auth("bob"))
    assert (await listing.json())["agents"] == []
    beat = await client.post("/v1/agents/office/heartbeat", headers=auth("alice"))
    assert beat.status == 404 and await error_code(beat) == "not_found"


async def test_background_sweep_removes_expired_entries(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]],
    store: RegistryStore, clock: ManualClock,
) -> None:
    cfg: RegistryServiceConfig = config(sweep_interval_seconds=0.1)
    client = await aiohttp_client(build_registry_app(cfg, store, clock))
    await put(client, "office", ttl_seconds=30)
    clock.advance(31)
    # Looking from before the expiry shows whether the row is still stored.
    assert await store.get("office", now=0.0) is not None

    async def swept() -> bool:
        return await store.get("office", now=0.0) is None

    await wait_until(swept, what="the sweep removed the expired entry")
