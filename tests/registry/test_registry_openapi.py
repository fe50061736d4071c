"""The registry's OpenAPI document against a real registry on port 0: every operation
with valid and invalid requests, every answer checked against the document, and every
documented status reached except 503 (test_registry_service.py covers the store being
unavailable)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from butler.registry.clock import ManualClock
from butler.registry.federation_config import FederationConfig, Upstream
from butler.registry.sqlite_store import SqliteStore
from tests.openapi_support import REGISTRY_V1, ApiDoc, error_code
from tests.registry.registry_support import TOKENS, LiveRegistry, auth, config, make_card

DOC = ApiDoc.packaged(REGISTRY_V1)
AGENT = "/v1/agents/{name}"
BEAT = "/v1/agents/{name}/heartbeat"
ARD = ("/search", "/explore", "/agents")
ARD_CODES = {"unauthenticated": "UNAUTHENTICATED", "header_too_large": "INVALID_ARGUMENT"}


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[LiveRegistry]:
    # "root" is a trusted upstream, so its gossip is accepted.
    federation = FederationConfig(upstreams=(Upstream("root", "http://127.0.0.1:9", "trusted",
                                                      "t"),), crawl_registered=False)
    reg = LiveRegistry(config(max_names_per_identity=2, max_writes_per_minute=40,
                              max_card_bytes=4096, body_timeout_seconds=0.3,
                              federation=federation), ManualClock())
    store = await SqliteStore.open(tmp_path / "registry.db")
    await reg.start(store)
    yield reg
    await reg.stop()
    await store.close()


class Walker:
    def __init__(self, reg: LiveRegistry, http: aiohttp.ClientSession) -> None:
        self.reg = reg
        self.http = http
        self.reached: set[tuple[str, str, int]] = set()

    async def call(self, method: str, template: str, expect: int, *, who: str | None = "alice",
                   name: str = "office", headers: dict[str, str] | None = None,
                   **kwargs: Any) -> Any:
        hdrs = {**(auth(who) if who else {}), **(headers or {})}
        url = self.reg.url + template.replace("{name}", name)
        async with self.http.request(method, url, headers=hdrs, **kwargs) as resp:
            status, got, body = resp.status, dict(resp.headers), await resp.read()
        data = DOC.check(method, template, status, got, body)
        assert status == expect, f"{method} {template}: {status} {body[:300]!r}"
        if status >= 400:
            assert error_code(data) in DOC.error_codes(method, template, status)
        self.reached.add((method, template, status))
        return data

    async def error(self, method: str, template: str, expect: int, code: str,
                    **kwargs: Any) -> None:
        data = await self.call(method, template, expect, **kwargs)
        assert error_code(data) == (ARD_CODES.get(code, code) if template in ARD else code), data

    async def slow_body(self, method: str, template: str) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.reg.port)
        path = template.replace("{name}", "office")
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     f"\r\nAuthorization: Bearer {TOKENS['alice']}\r\nContent-Length: 100\r\n"
                     "\r\n{".encode())
        async with asyncio.timeout(10):
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").strip().split("\r\n")
            headers = dict(line.split(": ", 1) for line in lines[1:])
            body = await reader.readexactly(int(headers["Content-Length"]))
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        DOC.check(method, template, int(lines[0].split()[1]), headers, body)
        self.reached.add((method, template, int(lines[0].split()[1])))


async def test_every_operation_answers_as_documented(registry: LiveRegistry) -> None:
    async with aiohttp.ClientSession() as http:
        await walk(Walker(registry, http))


async def walk(w: Walker) -> None:
    for template in ("/healthz", "/v1/openapi.json"):
        await w.call("GET", template, 200, who=None)
    assert await w.call("GET", "/v1/openapi.json", 200, who=None) == DOC.doc
    assert "butler_registry_agents 0" in await w.call("GET", "/metrics", 200)

    card = {"card": make_card(), "ttl_seconds": 60}
    await w.call("PUT", AGENT, 201, json=card)
    await w.call("PUT", AGENT, 200, json=card)
    await w.error("PUT", AGENT, 403, "name_owned", who="bob", json=card)
    await w.call("PUT", AGENT, 201, name="second", json=card)
    await w.error("PUT", AGENT, 403, "name_quota_exceeded", name="third", json=card)
    for body, code in [({"card": {"name": "x", "bogus": 1}}, "invalid_request"),
                       ({"card": make_card(), "ttl_seconds": 5}, "invalid_request"),
                       ({}, "invalid_request")]:
        await w.error("PUT", AGENT, 400, code, json=body)
    await w.error("PUT", AGENT, 400, "invalid_request", name="-bad", json=card)
    await w.error("PUT", AGENT, 400, "malformed_json", data=b"{",
                  headers={"Content-Type": "application/json"})
    await w.error("PUT", AGENT, 413, "payload_too_large",
                  json={"card": make_card(description="x" * 5000)})
    await w.error("PUT", AGENT, 415, "unsupported_media_type", data=b"x",
                  headers={"Content-Type": "text/plain"})
    await w.slow_body("PUT", AGENT)

    await w.call("GET", AGENT, 200)
    await w.error("GET", AGENT, 404, "not_found", name="nobody")
    await w.error("GET", AGENT, 400, "invalid_request", name="-bad")
    page = await w.call("GET", "/v1/agents", 200, params={"capability": "memory.search",
                                                         "limit": "1"})
    assert len(page["agents"]) == 1 and page["next_cursor"]
    await w.call("GET", "/v1/agents", 200, params={"cursor": page["next_cursor"], "q": "x"})
    for params in ({"limit": "0"}, {"nope": "1"}, {"cursor": "!!"}, {"capability": " "}):
        await w.error("GET", "/v1/agents", 400, "invalid_request", params=params)

    await w.call("POST", BEAT, 200)
    await w.call("POST", BEAT, 200, json={"ttl_seconds": 120})
    await w.error("POST", BEAT, 400, "invalid_request", json={"ttl_seconds": "soon"})
    await w.error("POST", BEAT, 403, "name_owned", who="bob")
    await w.error("POST", BEAT, 404, "not_found", name="nobody")
    await w.error("POST", BEAT, 413, "payload_too_large", json={"pad": "x" * 30_000})
    await w.error("POST", BEAT, 415, "unsupported_media_type", data=b"x",
                  headers={"Content-Type": "text/plain"})
    await w.slow_body("POST", BEAT)

    await walk_ard(w)

    await w.error("DELETE", AGENT, 403, "name_owned", who="bob")
    await w.error("DELETE", AGENT, 400, "invalid_request", name="-bad")
    await w.call("DELETE", AGENT, 204)
    await w.error("DELETE", AGENT, 404, "not_found")

    long_auth = {"Authorization": "Bearer " + "x" * 5000}
    for method, template in DOC.operations():
        if DOC.operation(method, template).get("security") != []:
            await w.error(method, template, 401, "unauthenticated", who=None)
            await w.error(method, template, 400, "header_too_large", who=None,
                          headers=long_auth)

    for method, template in [("PUT", AGENT), ("POST", BEAT), ("DELETE", AGENT)]:
        for _ in range(40):  # alice's writes per minute; the clock stands still
            status = await _status(w, method, template)
            if status == 429:
                break
        await w.error(method, template, 429, "rate_limited", json={"card": make_card()})

    documented = {(m, t, s) for m, t in DOC.operations() for s in DOC.statuses(m, t)}
    # The public routes read no Authorization header: only malformed HTTP is a 400 there,
    # see test_malformed_http_is_a_json_error.
    unreachable = {("GET", "/healthz", 400), ("GET", "/v1/openapi.json", 400)}
    missing = {x for x in documented - w.reached - unreachable if x[2] != 503}
    assert not missing, f"documented but never seen: {sorted(missing)}"


async def walk_ard(w: Walker) -> None:
    """ARD's routes and the federation routes beside /v1, on the agents just registered."""
    found = await w.call("POST", "/search", 200, json={"query": {"text": "memory search"},
                                                       "federation": "none", "pageSize": 1})
    assert found["results"][0]["identifier"].startswith("urn:air:127.0.0.1:agent:")
    await w.call("POST", "/search", 200, json={"query": {"text": "memory search"},
                                               "pageToken": found["pageToken"],
                                               "federation": "none", "pageSize": 1})
    await w.call("POST", "/explore", 200, json={"resultType": {"facets": [{"field": "type"}]}})
    await w.call("GET", "/agents", 200, params={"filter": "type = 'x'", "orderBy": "type DESC"})
    await w.call("GET", "/v1/catalog/status", 200)
    for template, body in (("/search", {"query": {"text": "x", "filter": {"nope": "x"}}}),
                           ("/explore", {"resultType": {}})):
        await w.error("POST", template, 400, "INVALID_ARGUMENT", json=body)
        await w.error("POST", template, 415, "INVALID_ARGUMENT", data=b"x",
                      headers={"Content-Type": "text/plain"})
        await w.error("POST", template, 413, "INVALID_ARGUMENT", json={"pad": "x" * 30_000})
    await w.error("GET", "/agents", 400, "INVALID_ARGUMENT", params={"filter": "nope = 'x'"})
    await w.error("POST", "/v1/gossip", 403, "forbidden", json={"entries": []})
    await w.call("POST", "/v1/gossip", 200, who="root", json={"entries": []})
    await w.error("POST", "/v1/gossip", 400, "invalid_request", who="root", json={"entries": 1})
    await w.error("POST", "/v1/gossip", 413, "payload_too_large", who="root",
                  json={"pad": "x" * 30_000})
    await w.error("POST", "/v1/gossip", 415, "unsupported_media_type", who="root", data=b"x",
                  headers={"Content-Type": "text/plain"})


async def _status(w: Walker, method: str, template: str) -> int:
    url = w.reg.url + template.replace("{name}", "office")
    async with w.http.request(method, url, headers=auth("alice"), json={"card": make_card()}
                              ) as resp:
        await resp.read()
        return resp.status


async def test_malformed_http_is_a_json_error(registry: LiveRegistry) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", registry.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"x" * 9000 + b"\r\n\r\n")
    async with asyncio.timeout(10):
        raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    DOC.check("GET", "/healthz", int(lines[0].split()[1]), headers,
              body[:int(headers.get("Content-Length", len(body)))])
