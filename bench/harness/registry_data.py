"""Synthetic agents for the registry bench, written straight through the store API.

Agent i has three of 100 capabilities (``cap.0`` .. ``cap.99``), so each capability is
provided by about 3 % of the agents: 30 at 1k, 300 at 10k, 3,000 at 100k, 30,000 at 1M.
Every tenth agent shares an owner, as if each identity had registered ten agents. Its
searchable text has words every agent has ("synthetic", "agent", "registry", "bench",
...), its own name's words, and one of 1,000 topics (``topicK``): a rare word, shared
by 0.1 % of the agents (100 at 100k).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from butler.registry.card import build_entry, validate_card
from butler.registry.store import Query, RegistryStore

CAPABILITIES = 100
TOPICS = 1000
TTL_SECONDS = 3600


def capabilities_of(i: int) -> list[str]:
    picks = dict.fromkeys([i % CAPABILITIES, (i * 7 + 3) % CAPABILITIES,
                           (i * 13 + 5) % CAPABILITIES, (i + 50) % CAPABILITIES])
    return [f"cap.{c}" for c in list(picks)[:3]]


def card(name: str, caps: list[str], topic: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"synthetic agent {name} for the registry bench, topic{topic}",
        "url": f"http://127.0.0.1:9/{name}", "version": "1.0.0", "capabilities": caps,
        "skills": [{"id": "work", "name": "work", "description": "does synthetic work",
                    "capabilities": caps, "tags": ["bench"]}],
    }


async def populate(store: RegistryStore, start: int, stop: int, concurrency: int = 64) -> float:
    """Register agents ``start..stop-1`` through ``store.upsert``; returns agents/second."""
    now = time.time()
    queue = iter(range(start, stop))

    async def worker() -> None:
        for i in queue:
            name = f"agent-{i:06d}"
            index = validate_card(card(name, capabilities_of(i), i % TOPICS), max_bytes=65536)
            entry = build_entry(name, f"owner-{i // 10}", index, url=index.url or "",
                                now=now, ttl_seconds=TTL_SECONDS)
            await store.upsert(entry, now=time.time(), max_names=16)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (stop - start) / (time.perf_counter() - began)


async def raw_query_latency(store: RegistryStore, seconds: float,
                            limit: int) -> dict[str, float]:
    """Sequential capability queries straight to the store: p50/p99 in ms."""
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    k = 0
    while time.perf_counter() < deadline or len(samples) < 20:
        query = Query(capability=f"cap.{k % CAPABILITIES}")
        began = time.perf_counter()
        found, _ = await store.query(query, now=time.time(), limit=limit)
        samples.append((time.perf_counter() - began) * 1000)
        if not found:
            raise RuntimeError(f"store query for {query.capability} found nothing")
        k += 1
    samples.sort()
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"queries": len(samples), "p50_ms": round(cuts[49], 3),
            "p99_ms": round(cuts[98], 3), "mean_ms": round(statistics.fmean(samples), 3)}


def registration_body() -> str:
    """The PUT /v1/agents/reg-{n} body for wrk (placeholders filled per request)."""
    return ('{"card":{"name":"reg-{n}","description":"registered over HTTP by the bench",'
            '"url":"http://127.0.0.1:9/reg-{n}","capabilities":["cap.{k}"],'
            '"skills":[{"id":"work","capabilities":["cap.{k}"],"tags":["bench"]}]},'
            '"ttl_seconds":3600}')
