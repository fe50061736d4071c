"""Federation between real registries on 127.0.0.1: trust levels, dedupe by identifier
and key, re-ranking, loops and hop limits, upstreams that hang or lie, and gossip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from butler.registry.catalog_entry import REGISTRY
from internal.signing import IdentityKey
from tests.registry.catalog_support import (
    Registry,
    Site,
    crawl_config,
    entry,
    manifest,
    registry,
    search_body,
    upstream,
)
from tests.registry.registry_support import auth, free_port
from tests.support import Swarm, wait_until

PUB = "127.0.0.1"
KEY, OTHER = IdentityKey.generate(), IdentityKey.generate()


async def publish(reg: Registry, site: Site, path: str, *entries: dict[str, Any]) -> None:
    site.pages[path] = manifest(*entries)
    url = site.url + path
    now = reg.ard.clock.now()
    report = await reg.ard.crawler.crawl(url, origin=f"catalog:{url}", now=now,
                                         expires_at=now + 3600)
    assert not report.refused and report.status == "ok", report


async def search(reg: Registry, body: dict[str, Any], who: str = "alice") -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.post(
            reg.url + "/search", json=body, headers=auth(who)) as resp:
        assert resp.status == 200, await resp.text()
        answer: dict[str, Any] = await resp.json()
        return answer


def by_id(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["identifier"]: r for r in answer["results"]}


async def test_auto_merges_by_trust_dedupes_and_marks_the_source(tmp_path: Path) -> None:
    async with Site().running() as site, \
            registry(tmp_path, "b", crawl_config()) as b, \
            registry(tmp_path, "c", crawl_config()) as c, \
            registry(tmp_path, "d", crawl_config()) as d:
        await publish(b, site, "/b.json", entry(PUB, "shared", key=KEY),
                      entry(PUB, "weather", key=KEY, tags=["weather"]))
        await publish(c, site, "/c.json", entry(PUB, "shared", key=KEY),
                      entry(PUB, "weather", key=OTHER, tags=["weather"]),  # another key
                      entry(PUB, "listedonly", tags=["weather"]))
        await publish(d, site, "/d.json", entry(PUB, "referred", tags=["weather"]))
        ups = (upstream("b", b.url, "trusted"), upstream("c", c.url, "listed"),
               upstream("d", d.url, "referral"))
        async with registry(tmp_path, "a", crawl_config(upstreams=ups)) as a:
            await publish(a, site, "/a.json", entry(PUB, "localweather", tags=["weather"]))
            answer = await search(a, search_body("weather agent"))
            found = by_id(answer)
            assert set(found) == {f"urn:air:{PUB}:agent:{n}" for n in (
                "localweather", "shared", "weather", "listedonly")}
            marks = {i.rsplit(":", 1)[1]: (r["sourceTrust"], r["source"])
                     for i, r in found.items()}
            assert marks == {"localweather": ("local", a.url), "shared": ("trusted", b.url),
                             "weather": ("trusted", b.url), "listedonly": ("listed", c.url)}
            assert a.ard.federation.dropped["key_conflict"] == 1  # c's weather, other key
            async with aiohttp.ClientSession() as http, http.get(
                    a.url + "/metrics", headers=auth("alice")) as resp:
                metrics = await resp.text()
            assert 'butler_registry_federation_dropped_total{reason="key_conflict"} 1' in metrics
            assert "butler_registry_catalog_entries 1\n" in metrics
            assert all(0 <= r["score"] <= 100 for r in answer["results"])
            assert "referrals" not in answer

            referred = await search(a, search_body("weather", "referrals"))
            assert set(by_id(referred)) == {f"urn:air:{PUB}:agent:localweather"}
            assert [(r["displayName"], r["type"], r["url"]) for r in referred["referrals"]] == [
                (n, REGISTRY, u + "/search") for n, u in (("b", b.url), ("c", c.url),
                                                          ("d", d.url))]
            alone = await search(a, search_body("weather", "none"))
            assert set(by_id(alone)) == {f"urn:air:{PUB}:agent:localweather"}


async def test_upstreams_that_hang_or_lie_are_dropped(tmp_path: Path) -> None:
    lies = {"results": [
        {**entry(PUB, "forged"), "score": 1000, "source": "http://169.254.169.254/"},
        {**entry(PUB, "hostile"), "url": "file:///etc/passwd", "score": 99},
        {"identifier": "not-a-urn", "displayName": "x", "type": "y", "url": "http://x/"},
        "not even an object",
    ], "pageToken": "upstream-token"}
    async with Site().running() as liar, Site().running() as hanger, \
            Site().running() as junk, Site().running() as site, \
            registry(tmp_path, "b", crawl_config()) as b:
        liar.pages["/search"] = lies
        hanger.pages["/search"] = hanger.hang
        junk.pages["/search"] = b"<html>garbage</html>"
        await publish(b, site, "/b.json", entry(PUB, "honest", tags=["forged"]))
        ups = (upstream("liar", liar.url, "listed"), upstream("hanger", hanger.url, "trusted"),
               upstream("junk", junk.url, "listed"), upstream("b", b.url, "trusted"))
        cfg = crawl_config(upstreams=ups, deadline_seconds=0.5)
        async with registry(tmp_path, "a", cfg) as a:
            answer = await search(a, search_body("forged honest", pageSize=100))
            found = by_id(answer)
            assert set(found) == {f"urn:air:{PUB}:agent:forged", f"urn:air:{PUB}:agent:honest"}
            forged = found[f"urn:air:{PUB}:agent:forged"]
            assert forged["score"] <= 100 and forged["source"] == liar.url  # ours, not its
            assert "pageToken" not in answer
            dropped = a.ard.federation.dropped
            assert dropped["deadline"] == 1 and dropped["malformed"] == 3
            assert dropped["unreachable"] == 1  # the one that answered HTML


async def test_registries_that_list_each_other_do_not_loop(tmp_path: Path) -> None:
    port_a, port_b = free_port(), free_port()
    url_a, url_b = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
    async with Site().running() as site, \
            registry(tmp_path, "a", crawl_config(upstreams=(upstream("b", url_b, "trusted"),)),
                     port_a) as a, \
            registry(tmp_path, "b", crawl_config(upstreams=(upstream("a", url_a, "trusted"),)),
                     port_b) as b:
        seen: list[dict[str, str]] = []

        async def spy(request: web.Request) -> web.Response:
            seen.append(dict(request.headers))
            return web.json_response({"results": []})

        await publish(a, site, "/a.json", entry(PUB, "alpha", tags=["loop"]))
        await publish(b, site, "/b.json", entry(PUB, "beta", tags=["loop"]))
        answer = await search(a, search_body("loop"))
        assert set(by_id(answer)) == {f"urn:air:{PUB}:agent:alpha", f"urn:air:{PUB}:agent:beta"}
        assert a.ard.federation.dropped["deadline"] == 0
        assert b.ard.federation.dropped["deadline"] == 0
        # A chain longer than the hop limit stops at it.
        site.pages["/search"] = spy
        chain = crawl_config(upstreams=(upstream("spy", site.url, "trusted"),), max_hops=1)
        async with registry(tmp_path, "c", chain) as c:
            await search(c, search_body("loop"))
            assert seen[-1]["ARD-Hop-Limit"] == "0"
            assert c.ard.identifier in seen[-1]["ARD-Via"]


async def test_gossip_brings_an_agent_registered_at_b_to_a(
        tmp_path: Path, swarm: Swarm, http: aiohttp.ClientSession) -> None:
    home = await swarm.start("home", skills=[{
        "id": "kitchen", "builtin": "echo", "capabilities": ["kitchen.timer"],
        "expose": True, "description": "Kitchen timers"}])
    async with http.get(home.url + "/v2/card", headers=home.headers()) as resp:
        card = await resp.json()
    port_a, port_b = free_port(), free_port()
    url_a, url_b = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
    # Each knows the other under the name of the token it calls with (alice, bob).
    cfg_a = crawl_config(upstreams=(upstream("bob", url_b, "trusted", who="alice"),))
    cfg_b = crawl_config(upstreams=(upstream("alice", url_a, "trusted", who="bob"),))
    async with registry(tmp_path, "a", cfg_a, port_a) as a, \
            registry(tmp_path, "b", cfg_b, port_b) as b:
        async with http.put(b.url + "/v1/agents/home", json={"card": card},
                            headers=auth("alice")) as resp:
            assert resp.status == 201
        await b.ard.settled()

        async def at_a() -> dict[str, Any] | None:
            # B pushes on its own once the crawl changed its index (no call from here).
            return by_id(await search(a, search_body("kitchen timer", "none"))).get(
                "urn:air:127.0.0.1:agent:home")

        item = await wait_until(at_a, what="the agent gossiped from B to A")
        assert (item["sourceTrust"], item["source"]) == ("trusted", b.url)

        # A push that is not from a trusted upstream, or not signed end to end, is refused.
        signed = dict(item)
        for key in ("score", "source", "sourceTrust"):
            signed.pop(key)
        tampered = {**signed, "url": "http://127.0.0.1:9/evil.json"}
        body = {"registry": "x", "entries": [tampered, entry(PUB, "unsigned")]}
        async with http.post(a.url + "/v1/gossip", json=body, headers=auth("bob")) as resp:
            answer = await resp.json()
        assert resp.status == 200 and answer["accepted"] == 0
        assert "signature" in answer["refused"][0] and "signed" in answer["refused"][1]
        async with http.post(a.url + "/v1/gossip", json=body, headers=auth("root")) as resp:
            assert resp.status == 403
        found = by_id(await search(a, search_body("kitchen timer", "none")))
        assert found["urn:air:127.0.0.1:agent:home"]["url"] == signed["url"]
        # Until it lapses: B stops pushing, A forgets after the gossip TTL.
        a.ard.index.expire(a.ard.clock.now() + 10_000)
        assert by_id(await search(a, search_body("kitchen timer", "none"))) == {}
        assert json.dumps(answer)  # the refusals are JSON the pusher can log
