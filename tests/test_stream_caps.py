"""Open event streams have caps of their own: a flood of streams from one caller does not
lock anyone else out, requests keep flowing, and ``/healthz`` is never refused."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from tests.a2a_support import WAIT
from tests.support import ECHO, Instance, Swarm, post_task, wait_task, wait_until

LIMITS = {"server": {"max_inflight": 4, "max_streams": 10, "max_streams_per_caller": 6,
                     "shutdown_grace_seconds": 0.2},
          "rate_limits": {"per_address_per_second": 0.001, "per_address_burst": 1000}}


async def waiting_task(inst: Instance, who: str) -> str:
    _, task = await post_task(inst, {"task": "x", "skill": "wait", "mode": "async"}, who=who)
    await wait_task(inst, task["id"], {"working"}, who=who, message="waiting")
    return str(task["id"])


@contextlib.asynccontextmanager
async def stream(inst: Instance, task_id: str, who: str) -> AsyncIterator[aiohttp.ClientResponse]:
    """An open /v2 event stream (its first event read), or the refusal."""
    async with inst.session.get(f"{inst.url}/v2/tasks/{task_id}/events",
                                headers=inst.headers(who)) as resp:
        if resp.status == 200:
            await resp.content.readuntil(b"\n\n")
        yield resp


async def test_a_stream_flood_locks_nobody_out(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, WAIT], callers={"flood": {}, "other": {}},
                             extra=LIMITS)
    flood = [await waiting_task(home, "flood") for _ in range(7)]
    async with contextlib.AsyncExitStack() as held:
        for task_id in flood[:6]:  # more streams than max_inflight (4)
            resp = await held.enter_async_context(stream(home, task_id, "flood"))
            assert resp.status == 200
        async with stream(home, flood[6], "flood") as refused:
            body: dict[str, Any] = await refused.json()
            assert refused.status == 429 and body["error"]["code"] == "too_many_streams"
            assert refused.headers["Retry-After"] == "1"
        # Everyone else, the flooding caller's plain requests included, still gets in.
        for who in ("other", "flood"):
            status, task = await post_task(home, {"task": "hi", "skill": "echo"}, who=who)
            assert status == 200 and task["state"] == "completed", who
        mine = await waiting_task(home, "other")
        async with stream(home, mine, "other") as resp:
            assert resp.status == 200
        async with home.session.get(home.url + "/healthz") as resp:
            assert resp.status == 200
    # The streams give their slots back once the daemon sees their clients gone (it
    # looks every second).
    async def streamed() -> bool:
        async with stream(home, flood[6], "flood") as resp:
            assert resp.status in (200, 429)
            return resp.status == 200

    await wait_until(streamed)


async def test_healthz_is_never_refused(swarm: Swarm) -> None:
    home = await swarm.start("home", extra={"rate_limits": {
        "per_address_per_second": 0.001, "per_address_burst": 1}})
    async with home.session.get(home.url + "/v2/card", headers=home.headers()) as resp:
        assert resp.status == 200  # the one request the bucket allows
    async with home.session.get(home.url + "/v2/card", headers=home.headers()) as resp:
        assert resp.status == 429
    answers = await asyncio.gather(*(home.session.get(home.url + "/healthz")
                                     for _ in range(20)))
    assert [r.status for r in answers] == [200] * 20
    for r in answers:
        r.release()
