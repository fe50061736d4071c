"""Web ingestion: catalogs crawled through the outbound guard into the index, with their
limits (size, nesting, depth, cycles), caching, publisher checks and key continuity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from butler.registry.catalog_entry import CATALOG, ROTATIONS_KEY, sign_entry
from internal.signing import IdentityKey, rotation_statement
from tests.hostile_urls import Listener, hostile_urls
from tests.registry.catalog_support import (
    Registry,
    Site,
    crawl_config,
    entry,
    manifest,
    registry,
    search_body,
)
from tests.registry.registry_support import auth
from tests.support import Swarm

PUB = "127.0.0.1"  # the host the test site is fetched from, so the publisher it may name
KEY = IdentityKey.generate()


async def crawl(reg: Registry, url: str) -> Any:
    return await reg.ard.crawler.crawl(url, origin=f"catalog:{url}", now=reg.ard.clock.now(),
                                       expires_at=reg.ard.clock.now() + 3600)


async def ids(reg: Registry, text: str = "agent") -> list[str]:
    async with aiohttp.ClientSession() as http, http.post(
            reg.url + "/search", json=search_body(text, "none", pageSize=100),
            headers=auth("alice")) as resp:
        assert resp.status == 200
        return sorted(r["identifier"] for r in (await resp.json())["results"])


async def test_configured_catalogs_are_crawled_nested_and_searchable(tmp_path: Path) -> None:
    async with Site().running() as site:
        nested_inline = {**entry(PUB, "bundle"), "type": CATALOG}
        del nested_inline["url"]
        nested_inline["data"] = manifest(entry(PUB, "inner", key=KEY))
        site.pages["/.well-known/ai-catalog.json"] = manifest(
            entry(PUB, "alpha", key=KEY),
            nested_inline,
            {**entry(PUB, "more"), "type": CATALOG, "url": site.url + "/more.json"},
        )
        # It lists the root again (a cycle) and one more level.
        site.pages["/more.json"] = manifest(
            entry(PUB, "beta", key=KEY),
            {**entry(PUB, "back"), "type": CATALOG,
             "url": site.url + "/.well-known/ai-catalog.json"})
        cfg = crawl_config(catalogs=(site.url + "/.well-known/ai-catalog.json",))
        async with registry(tmp_path, "reg", cfg) as reg:
            await reg.ard.crawled.wait()  # the round at start-up
            assert await ids(reg) == [f"urn:air:{PUB}:agent:{n}" for n in (
                "alpha", "back", "beta", "bundle", "inner", "more")]
            fetched = [path for path, _ in site.asked]
            assert fetched.count("/.well-known/ai-catalog.json") == 1  # the cycle ends
            assert fetched.count("/more.json") == 1


async def test_depth_and_entry_limits_stop_the_crawl(tmp_path: Path) -> None:
    async with Site().running() as site:
        for depth in range(5):
            site.pages[f"/c{depth}.json"] = manifest(
                entry(PUB, f"level{depth}"),
                {**entry(PUB, f"next{depth}"), "type": CATALOG,
                 "url": f"{site.url}/c{depth + 1}.json"})
        site.pages["/wide.json"] = manifest(*(entry(PUB, f"wide{i}") for i in range(10)))
        cfg = crawl_config(max_catalog_depth=2, max_catalog_entries=6)
        async with registry(tmp_path, "reg", cfg) as reg:
            report = await crawl(reg, site.url + "/c0.json")
            assert [p for p, _ in site.asked] == ["/c0.json", "/c1.json", "/c2.json"]
            assert any("depth limit" in r for r in report.refused)
            assert len(report.admitted) == 6
            report = await crawl(reg, site.url + "/wide.json")
            assert any("more than 6 entries" in r for r in report.refused)
            assert len(report.admitted) == 6


@pytest.mark.parametrize("page, why", [
    (b"{not json", "JSON"),
    (b"[" * 100 + b"]" * 100, "nest"),
    (json.dumps({"entries": []}).encode(), "not an AI catalog"),
    (json.dumps(manifest(entry(PUB, "x"))).encode() + b" " * 70_000, "exceeds"),
    ((500, b"oops", {}), "HTTP 500"),
    ((302, b"", {"Location": "http://169.254.169.254/"}), "HTTP 302"),
])
async def test_bad_catalogs_fail_with_a_reason_and_keep_what_was_indexed(
        tmp_path: Path, page: Any, why: str) -> None:
    async with Site().running() as site:
        url = site.url + "/c.json"
        site.pages["/c.json"] = manifest(entry(PUB, "kept"))
        async with registry(tmp_path, "reg", crawl_config(max_catalog_bytes=65_536)) as reg:
            assert (await crawl(reg, url)).admitted == [f"urn:air:{PUB}:agent:kept"]
            site.pages["/c.json"] = page
            reg.ard.crawler._known.clear()  # due again, no ETag
            report = await crawl(reg, url)
            assert report.status == "failed" and why in report.reason, report.reason
            now = reg.ard.clock.now()  # not asked again at every round
            assert not reg.ard.crawler.due(f"catalog:{url}", url, now + 60)
            assert await ids(reg) == [f"urn:air:{PUB}:agent:kept"]


async def test_entries_naming_another_publisher_or_hostile_urls_are_refused(
        tmp_path: Path) -> None:
    async with Site().running() as site, Listener().running() as listener:
        hostile = [{**entry(PUB, f"h{i}"), "url": url}
                   for i, url in enumerate(hostile_urls(listener.port))]
        nested_hostile = [{**entry(PUB, f"n{i}"), "type": CATALOG, "url": url}
                          for i, url in enumerate(hostile_urls(listener.port))
                          if url.startswith("http")]
        site.pages["/c.json"] = manifest(entry("google.com", "taxes"), entry(PUB, "fine"),
                                         *hostile, *nested_hostile)
        async with registry(tmp_path, "reg", crawl_config()) as reg:
            report = await crawl(reg, site.url + "/c.json")
            assert any("publisher google.com does not match 127.0.0.1" in r
                       for r in report.refused)
            assert f"urn:air:{PUB}:agent:fine" in report.admitted
            assert "urn:air:google.com:agent:taxes" not in await ids(reg)
            assert listener.connections == 0  # nothing an entry says reached the listener


async def test_signatures_and_key_continuity_quarantine_with_a_reason(tmp_path: Path) -> None:
    other = IdentityKey.generate()
    async with Site().running() as site:
        url = site.url + "/c.json"
        good = entry(PUB, "signed", key=KEY)
        tampered = {**entry(PUB, "tampered", key=KEY), "description": "changed after signing"}
        site.pages["/c.json"] = manifest(good, tampered)
        async with registry(tmp_path, "reg", crawl_config()) as reg:
            report = await crawl(reg, url)
            assert report.admitted == [good["identifier"]]
            [why] = report.refused
            assert "tampered quarantined: signature" in why
            # The same identifier, now signed by another key without a rotation statement.
            site.pages["/c.json"] = manifest(entry(PUB, "signed", key=other))
            reg.ard.crawler._known.clear()
            report = await crawl(reg, url)
            assert "without a rotation statement" in report.refused[0]
            assert await ids(reg) == []
            status = reg.ard.index.quarantine
            assert {q.identifier for q in status.values()} == {
                good["identifier"], tampered["identifier"]}
            # With the old key's statement, the new key takes over.
            statement = rotation_statement(KEY, other.public, "2026-01-01T00:00:00Z")
            rotated = entry(PUB, "signed", key=None,
                            metadata={ROTATIONS_KEY: statement})
            site.pages["/c.json"] = manifest(sign_entry(rotated, other, (statement,)))
            reg.ard.crawler._known.clear()
            report = await crawl(reg, url)
            assert report.admitted == [good["identifier"]], report.refused
            assert reg.ard.index.pins[good["identifier"]] == other.public


async def test_etag_and_cache_control_are_honoured(tmp_path: Path) -> None:
    async with Site().running() as site:
        body = json.dumps(manifest(entry(PUB, "cached"))).encode()

        async def page(request: web.Request) -> web.Response:
            headers = {"ETag": '"v1"', "Cache-Control": "public, max-age=7200"}
            if request.headers.get("If-None-Match") == '"v1"':
                return web.Response(status=304, headers=headers)
            return web.Response(body=body, content_type="application/json", headers=headers)

        site.pages["/c.json"] = page
        url = site.url + "/c.json"
        async with registry(tmp_path, "reg", crawl_config(crawl_interval_seconds=60)) as reg:
            assert (await crawl(reg, url)).status == "ok"
            now = reg.ard.clock.now()
            origin = f"catalog:{url}"
            assert not reg.ard.crawler.due(origin, url, now + 3600)  # max-age beats 60 s
            assert reg.ard.crawler.due(origin, url, now + 7300)
            assert (await crawl(reg, url)).status == "not_modified"
            assert site.asked[-1][1]["If-None-Match"] == '"v1"'
            assert await ids(reg) == [f"urn:air:{PUB}:agent:cached"]


async def test_a_registered_butler_appears_as_its_signed_catalog(
        tmp_path: Path, swarm: Swarm, http: aiohttp.ClientSession) -> None:
    home = await swarm.start("home", skills=[{
        "id": "weather", "builtin": "echo", "capabilities": ["weather.forecast"],
        "expose": True, "examples": ["forecast for Paris", "rain in Oslo"]}])
    async with http.get(home.url + "/v2/card", headers=home.headers()) as resp:
        card = await resp.json()
    async with registry(tmp_path, "reg", crawl_config()) as reg:
        async with http.put(reg.url + "/v1/agents/home", json={"card": card},
                            headers=auth("alice")) as resp:
            assert resp.status == 201
        await reg.ard.settled()
        async with http.post(reg.url + "/search", json=search_body("rain in Oslo"),
                             headers=auth("alice")) as resp:
            results = (await resp.json())["results"]
        by_id = {r["identifier"]: r for r in results}
        assert set(by_id) == {"urn:air:127.0.0.1:agent:home", "urn:air:127.0.0.1:mcp:home"}
        own = by_id["urn:air:127.0.0.1:agent:home"]
        assert own["trustManifest"]["identityType"] == "did"  # the crawled, signed copy
        assert reg.ard.index.pins[own["identifier"]] == home.daemon.identity.key.public
