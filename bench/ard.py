#!/usr/bin/env python3
"""The registry's ARD API at scale: ``.venv/bin/python bench/ard.py [--entries N]``.

Fills one registry's catalog index with N synthetic entries (names, tags, capabilities,
queries and descriptions drawn from a 3,000-word vocabulary with a Zipf-like skew, so
common words are on many entries; 200 publishers; a fifth of the entries MCP), then
times over HTTP on 127.0.0.1, one request at a time (median, p90, p99, in ms):

- ``POST /search`` with 2-4 words of text, and with a filter only (a rare tag, text
  one word);
- ``GET /agents`` pages (a type filter, pageSize 20);
- ``POST /search`` with ``federation: auto`` over 3 upstream registries on this host,
  against the same search with ``none``;
- crawling one 10,000-entry catalog (``--catalog``) served from this host.

The index is in memory whichever store the registry uses (the store holds registrations,
not the index), so one run covers both. bench/HISTORY.md records the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The intent bench's synthetic words (bench/ is on the path when a bench runs).
from intent.speed import VOCABULARY, _word

from butler.registry.ard_api import ARD
from butler.registry.catalog_entry import A2A_CARD, MCP_CARD
from butler.registry.clock import SystemClock
from butler.registry.config import RegistryServiceConfig
from butler.registry.federation_config import FederationConfig, Upstream
from butler.registry.service import RunningRegistry, start_registry
from butler.registry.sqlite_store import SqliteStore
from internal.http import TokenEntry, hash_token
from internal.protocol.a2a.model import Identity

TOKEN = "bench-token-0123456789"


def entries(n: int, seed: int = 7, publisher: str | None = None) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    words = [_word(i) for i in range(VOCABULARY)]
    weights = [1 / (i + 1) for i in range(VOCABULARY)]

    def some(k: int) -> list[str]:
        return rng.choices(words, weights, k=k)

    out = []
    for i in range(n):
        pub = publisher or f"pub{i % 200}.example"
        out.append({
            "identifier": f"urn:air:{pub}:agent:a{i}", "displayName": " ".join(some(2)),
            "type": MCP_CARD if i % 5 == 0 else A2A_CARD,
            "url": f"https://{pub}/agents/a{i}.json", "description": " ".join(some(12)),
            "tags": some(3), "capabilities": [f"{w}.run" for w in some(2)],
            "representativeQueries": [" ".join(some(6)), " ".join(some(6))]})
    return out


def config(**federation: Any) -> RegistryServiceConfig:
    token = TokenEntry(bytes.fromhex(hash_token(TOKEN)), Identity(name="bench", tier="admin",
                                                                  bound=True))
    return RegistryServiceConfig(tokens=(token,), sweep_interval_seconds=3600.0,
                                 max_inflight=10_000, federation=FederationConfig(
                                     crawl_registered=False, crawl_loopback=True,
                                     max_catalog_entries=1_000_000,
                                     max_catalog_bytes=64 * 1024 * 1024, **federation))


async def serve(folder: Path, name: str, cfg: RegistryServiceConfig) -> RunningRegistry:
    store = await SqliteStore.open(folder / f"{name}.db")
    cfg = dataclasses.replace(cfg, port=0)
    return await start_registry(cfg, store, SystemClock())


def fill(reg: RunningRegistry, items: list[dict[str, Any]]) -> float:
    ard = reg.runner.app[ARD]
    now = time.time()
    started = time.perf_counter()
    for item in items:
        ard.index.admit(item, origin="bench", source=ard.source, trust="local",
                        expires_at=now + 86_400, now=now)
    return time.perf_counter() - started


def summary(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    return f"median {statistics.median(ms):7.2f}  p90 {p(0.9):7.2f}  p99 {p(0.99):7.2f} ms"


async def timed(http: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> float:
    started = time.perf_counter()
    async with http.request(method, url, headers={"Authorization": f"Bearer {TOKEN}"},
                            **kw) as resp:
        await resp.read()
        assert resp.status == 200, (resp.status, await resp.text())
    return time.perf_counter() - started


async def main(n: int, catalog: int, rounds: int) -> None:
    words = [_word(i) for i in range(VOCABULARY)]
    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        ups = [await serve(folder, f"up{i}", config()) for i in range(3)]
        for i, up in enumerate(ups):
            fill(up, entries(1000, seed=100 + i))
        upstreams = tuple(Upstream(f"up{i}", f"http://127.0.0.1:{up.address[1]}", "trusted",
                                   TOKEN) for i, up in enumerate(ups))
        reg = await serve(folder, "main", config(upstreams=upstreams))
        items = entries(n)
        seconds = fill(reg, items)
        print(f"index of {n} entries built in {seconds:.1f} s "
              f"({seconds / n * 1e6:.0f} us per entry)")
        base = f"http://127.0.0.1:{reg.address[1]}"
        async with aiohttp.ClientSession() as http:
            async def search(body: dict[str, Any]) -> float:
                return await timed(http, "POST", base + "/search", json=body)

            texts = [" ".join(rng.choices(words[:1500], k=rng.randint(2, 4)))
                     for _ in range(rounds)]
            await search({"query": {"text": texts[0]}, "federation": "none"})
            text = [await search({"query": {"text": t}, "federation": "none"}) for t in texts]
            print(f"POST /search, text       {summary(text)}")
            rare = [w for w in words[2000:2000 + rounds]]
            filt = [await search({"query": {"text": "x", "filter": {"tags": w}},
                                  "federation": "none"}) for w in rare]
            print(f"POST /search, filter     {summary(filt)}")
            url = base + "/agents?filter=" + "type%20%3D%20%27application/mcp-server-card%2Bjson%27"
            pages = [await timed(http, "GET", url) for _ in range(max(5, rounds // 10))]
            print(f"GET /agents, one page    {summary(pages)}")
            small = texts[:max(20, rounds // 5)]
            none = [await search({"query": {"text": t}, "federation": "none"}) for t in small]
            auto = [await search({"query": {"text": t}, "federation": "auto"}) for t in small]
            print(f"search none (same texts) {summary(none)}")
            print(f"search auto, 3 upstreams {summary(auto)}")
            site = web.Application()
            body = json.dumps({"specVersion": "1.0", "entries": entries(
                catalog, seed=3, publisher="127.0.0.1")}).encode()
            site.router.add_get("/c.json", lambda _: web.Response(
                body=body, content_type="application/json"))
            runner = web.AppRunner(site)
            await runner.setup()
            tcp = web.TCPSite(runner, "127.0.0.1", 0)
            await tcp.start()
            port = runner.addresses[0][1]
            ard = reg.runner.app[ARD]
            started = time.perf_counter()
            report = await ard.crawler.crawl(f"http://127.0.0.1:{port}/c.json", origin="big",
                                             expires_at=time.time() + 3600, now=time.time())
            took = time.perf_counter() - started
            print(f"crawl of a {catalog}-entry catalog ({len(body) // 1024} KiB): "
                  f"{took:.2f} s, {len(report.admitted)} admitted, {len(report.refused)} refused")
            await runner.cleanup()
        for r in (reg, *ups):
            await r.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--catalog", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.entries, args.catalog, args.rounds))
