"""ARD's REST API on the registry (POST /search, POST /explore, GET /agents), over both
stores: registered agents appear as catalog entries; bad requests get ARD's error shape."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from butler.registry.ard_api import ARD
from butler.registry.clock import ManualClock
from butler.registry.federation_config import FederationConfig
from butler.registry.service import build_registry_app
from butler.registry.store import RegistryStore
from tests.registry.registry_support import auth, config, make_card

Client = TestClient[web.Request, web.Application]

WEATHER = [{"id": "forecast", "name": "Weather forecast", "description": "Forecasts by city",
            "capabilities": ["weather.forecast"], "tags": ["weather"],
            "examples": ["forecast for Paris", "will it rain in Oslo tomorrow"]}]
TRAVEL = [{"id": "flights", "name": "Flight booking", "description": "Books flights",
           "capabilities": ["travel.book"], "tags": ["travel"],
           "examples": ["book a flight to Tokyo", "find a cheap flight"]}]


@pytest.fixture
async def client(aiohttp_client: Callable[[web.Application], Awaitable[Client]],
                 store: RegistryStore, clock: ManualClock) -> Client:
    # Not crawled: these agents' hosts do not exist (test_ard_ingest.py crawls).
    federation = FederationConfig(crawl_registered=False)
    c = await aiohttp_client(build_registry_app(config(federation=federation), store, clock))
    for name, skills, url in (("weather", WEATHER, "http://weather.example:8081"),
                              ("travel", TRAVEL, "http://travel.example:8081")):
        card = make_card(name.title(), caps=(), skills=skills, url=url,
                         description=f"The {name} agent")
        resp = await c.put(f"/v1/agents/{name}", json={"card": card}, headers=auth("alice"))
        assert resp.status == 201
    await c.app[ARD].settled()
    return c


async def post(client: Client, path: str, body: Any, who: str = "alice") -> tuple[int, Any]:
    resp = await client.post(path, json=body, headers=auth(who))
    return resp.status, await resp.json()


async def test_search_finds_registered_agents_as_catalog_entries(client: Client) -> None:
    status, body = await post(client, "/search", {"query": {"text": "rain forecast in Oslo"}})
    assert status == 200
    [top] = body["results"]
    assert top["identifier"] == "urn:air:weather.example:agent:weather"
    assert top["type"] == "application/a2a-agent-card+json"
    assert top["url"] == "http://weather.example:8081/.well-known/agent-card.json"
    assert top["capabilities"] == ["weather.forecast"]
    assert 0 < top["score"] <= 100 and isinstance(top["score"], int)
    assert top["sourceTrust"] == "local" and top["source"].startswith("http://")
    assert top["metadata"] == {"registryName": "weather", "registrant": "alice"}
    # /v1 still answers from the same store
    resp = await client.get("/v1/agents?q=forecast", headers=auth("alice"))
    assert [a["name"] for a in (await resp.json())["agents"]] == ["weather"]


async def test_filters_compose_with_text(client: Client) -> None:
    text = {"text": "agent"}
    for flt, expected in (
        ({"capabilities": ["travel.book"]}, ["urn:air:travel.example:agent:travel"]),
        ({"publisher": "weather.example"}, ["urn:air:weather.example:agent:weather"]),
        ({"tags": "TRAVEL"}, ["urn:air:travel.example:agent:travel"]),
        ({"type": ["application/mcp-server-card+json"]}, []),
        ({"metadata.registryName": ["weather", "travel"]},
         ["urn:air:travel.example:agent:travel", "urn:air:weather.example:agent:weather"]),
    ):
        status, body = await post(client, "/search", {"query": {**text, "filter": flt},
                                                      "federation": "none"})
        assert status == 200, body
        assert sorted(r["identifier"] for r in body["results"]) == expected, flt


@pytest.mark.parametrize("body, field", [
    ({"query": {"text": "x", "filter": {"no.such.path": ["a"]}}}, "no.such.path"),
    ({"query": {"text": "x", "filter": {"trustManifest.secret": "a"}}}, "trustManifest"),
    ({"query": {"filter": {"type": "a"}}}, "query.text"),
    ({"query": {"text": ""}}, "query.text"),
    ({"query": {"text": "x"}, "federation": "everywhere"}, "federation"),
    ({"query": {"text": "x"}, "pageSize": 1000}, "pageSize"),
    ({"query": {"text": "x"}, "extra": 1}, "extra"),
    ({"query": {"text": "x"}, "pageToken": "forged.token"}, "pageToken"),
    ({"query": {"text": "x", "filter": {"tags": [{"$ne": 1}]}}}, "query.filter.tags"),
    ([], "body"),
])
async def test_bad_searches_are_invalid_argument(client: Client, body: Any,
                                                 field: str) -> None:
    status, answer = await post(client, "/search", body)
    assert status == 400
    assert answer["errorCode"] == "INVALID_ARGUMENT"
    assert field in answer["message"]


async def test_errors_take_ards_shape_and_v1_keeps_its_own(client: Client) -> None:
    resp = await client.post("/search", json={"query": {"text": "x"}})
    assert resp.status == 401 and (await resp.json())["errorCode"] == "UNAUTHENTICATED"
    resp = await client.post("/search", data=b"{not json", headers={
        **auth("alice"), "Content-Type": "application/json"})
    assert resp.status == 400 and (await resp.json())["errorCode"] == "INVALID_ARGUMENT"
    resp = await client.get("/v1/agents?bogus=1", headers=auth("alice"))
    assert (await resp.json())["error"]["code"] == "invalid_request"


async def test_pages_follow_tokens_and_refuse_other_queries(client: Client) -> None:
    query = {"query": {"text": "agent"}, "pageSize": 1, "federation": "none"}
    _, first = await post(client, "/search", query)
    _, second = await post(client, "/search", {**query, "pageToken": first["pageToken"]})
    assert "pageToken" not in second
    ids = [first["results"][0]["identifier"], second["results"][0]["identifier"]]
    assert sorted(ids) == ["urn:air:travel.example:agent:travel",
                           "urn:air:weather.example:agent:weather"]
    other = {"query": {"text": "flight"}, "pageToken": first["pageToken"]}
    status, answer = await post(client, "/search", other)
    assert (status, answer["errorCode"]) == (400, "INVALID_ARGUMENT")
    token = first["pageToken"]
    tampered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    status, _ = await post(client, "/search", {**query, "pageToken": tampered})
    assert status == 400


async def test_explore_counts_facets_over_the_matched_set(client: Client) -> None:
    status, body = await post(client, "/explore", {"resultType": {"facets": [
        {"field": "publisher"}, {"field": "tags", "limit": 1}, {"field": "type"}]}})
    assert status == 200
    facets = body["facets"]
    assert body["resultType"] == "facets"
    assert facets["type"]["buckets"] == [{"value": "application/a2a-agent-card+json",
                                          "count": 2}]
    assert {b["value"] for b in facets["publisher"]["buckets"]} == {"weather.example",
                                                                    "travel.example"}
    assert len(facets["tags"]["buckets"]) == 1 and facets["tags"]["otherCount"] == 1
    _, narrowed = await post(client, "/explore", {"query": {"text": "flight"},
                                                  "resultType": {"facets": [{"field": "tags"}]}})
    assert narrowed["facets"]["tags"]["buckets"] == [{"value": "travel", "count": 1}]
    status, bad = await post(client, "/explore", {"resultType": {"facets": [{"field": "x"}]}})
    assert (status, bad["errorCode"]) == (400, "INVALID_ARGUMENT")


async def list_ids(client: Client, **params: str) -> tuple[int, Any]:
    resp = await client.get("/agents", params=params, headers=auth("alice"))
    return resp.status, await resp.json()


async def test_agents_lists_deterministically_with_filters_order_and_pages(
        client: Client) -> None:
    status, body = await list_ids(client)
    assert status == 200 and body["total"] == 2
    assert [i["identifier"] for i in body["items"]] == [
        "urn:air:travel.example:agent:travel", "urn:air:weather.example:agent:weather"]
    _, desc = await list_ids(client, orderBy="displayName DESC")
    assert [i["displayName"] for i in desc["items"]] == ["Weather", "Travel"]
    _, mixed = await list_ids(client, orderBy="type ASC, displayName DESC")
    assert [i["displayName"] for i in mixed["items"]] == ["Weather", "Travel"]
    _, flt = await list_ids(client, filter="type = 'application/a2a-agent-card+json' AND "
                            "publisherId = 'travel.example,nowhere.example'")
    assert [i["displayName"] for i in flt["items"]] == ["Travel"]
    _, named = await list_ids(client, filter="displayName = 'eath'")
    assert [i["displayName"] for i in named["items"]] == ["Weather"]
    _, page = await list_ids(client, pageSize="1")
    _, rest = await list_ids(client, pageSize="1", pageToken=page["pageToken"])
    assert [i["displayName"] for i in page["items"] + rest["items"]] == ["Travel", "Weather"]
    _, created = await list_ids(client, filter="createdAfter > '2999-01-01'")
    assert created["items"] == [] and created["total"] == 0
    for params in ({"filter": "bogus = 'x'"}, {"filter": "type ~ 'x'"},
                   {"orderBy": "score"}, {"pageSize": "0"}, {"pageToken": "nope"},
                   {"unknown": "1"}, {"filter": "createdAfter > 'yesterday'"}):
        status, err = await list_ids(client, **params)
        assert (status, err["errorCode"]) == (400, "INVALID_ARGUMENT"), params


async def test_deregistered_agents_leave_the_index(client: Client) -> None:
    resp = await client.delete("/v1/agents/travel", headers=auth("alice"))
    assert resp.status == 204
    _, body = await list_ids(client)
    assert [i["displayName"] for i in body["items"]] == ["Weather"]


async def test_expired_agents_leave_search(client: Client, clock: ManualClock) -> None:
    clock.advance(10_000)
    _, body = await post(client, "/search", {"query": {"text": "agent"}})
    assert body["results"] == []


async def test_a_replica_finds_agents_registered_through_another(
        aiohttp_client: Callable[[web.Application], Awaitable[Client]],
        client: Client, store: RegistryStore, clock: ManualClock) -> None:
    # A second registry on the same store: a restart, or another replica on Redis.
    federation = FederationConfig(crawl_registered=False)
    other = await aiohttp_client(build_registry_app(config(federation=federation), store,
                                                    clock))
    ard = other.app[ARD]
    await ard.crawled.wait()  # its round at start-up read the store
    assert set(ard.index.entries) == {"urn:air:travel.example:agent:travel",
                                      "urn:air:weather.example:agent:weather"}
    # Refreshed through the first replica: the second extends its copy when it reads again.
    clock.advance(250)
    resp = await client.post("/v1/agents/travel/heartbeat", headers=auth("alice"))
    assert resp.status == 200
    clock.advance(150)  # past the first TTL, within the refreshed one, past a resync period
    await ard.crawl_due()
    assert set(ard.index.entries) == {"urn:air:travel.example:agent:travel"}
