"""Memory given back once the daemon goes quiet after a burst (butler/runtime/heap.py):
once per burst, never during one, off the event loop; the collection alone off glibc."""

from __future__ import annotations

import asyncio
import gc
import threading
from pathlib import Path

import aiohttp
import pytest

from butler.runtime.heap import (
    QUIET_SECONDS,
    HeapKeeper,
    c_library,
    give_memory_back,
    malloc_trim,
)
from tests.support import config_dict, gated_skill, start_instance, wait_until


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorded:
    """A give-back that records the threads it ran in."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    def __call__(self) -> int:
        self.threads.append(threading.get_ident())
        return 0


async def checks(keeper: HeapKeeper, clock: Clock, seconds: float) -> list[bool]:
    """One ``check`` a second for ``seconds`` of the test's clock."""
    found = []
    for _ in range(int(seconds)):
        clock.now += 1
        found.append(await keeper.check())
    return found


async def test_given_back_once_after_a_burst_goes_quiet_and_never_during_it() -> None:
    clock, gave, load = Clock(), Recorded(), [0]
    keeper = HeapKeeper(lambda: load[0], clock=clock, give_back=gave, burst=32)
    assert not any(await checks(keeper, clock, 60))  # quiet from the start: no burst
    load[0] = 200
    assert not any(await checks(keeper, clock, 60))  # the burst
    load[0] = 30  # more than an eighth of its peak: not quiet yet
    assert not any(await checks(keeper, clock, 60))
    load[0] = 2
    after = await checks(keeper, clock, QUIET_SECONDS + 60)
    assert after.count(True) == 1 and after.index(True) == QUIET_SECONDS
    assert len(gave.threads) == 1


async def test_a_busy_sample_starts_the_quiet_over() -> None:
    clock, gave, load = Clock(), Recorded(), [100]
    keeper = HeapKeeper(lambda: load[0], clock=clock, give_back=gave, burst=32)
    await checks(keeper, clock, 1)
    load[0] = 0
    assert not any(await checks(keeper, clock, QUIET_SECONDS - 1))
    load[0] = 100  # back before the quiet time was up
    await checks(keeper, clock, 1)
    load[0] = 0
    after = await checks(keeper, clock, QUIET_SECONDS + 1)
    assert after.index(True) == QUIET_SECONDS and not gave.threads[1:]


async def test_memory_is_given_back_off_the_event_loop() -> None:
    clock, gave, load = Clock(), Recorded(), [100]
    keeper = HeapKeeper(lambda: load[0], clock=clock, give_back=gave, burst=32)
    await checks(keeper, clock, 1)
    load[0] = 0
    await checks(keeper, clock, QUIET_SECONDS + 1)
    assert gave.threads and gave.threads[0] != threading.get_ident()


def test_without_glibc_only_the_collector_runs() -> None:
    for other in (None, "", "musl libc 1.2.4"):
        assert malloc_trim(other) is None
    assert give_memory_back(None) >= 0
    here = c_library()
    if here is not None and here.startswith("glibc"):  # this host's: trimmed for real
        assert give_memory_back(malloc_trim(here)) >= 0


async def test_a_daemons_blocking_requests_are_a_burst_and_their_end_its_quiet(
        tmp_path: Path) -> None:
    """On a real daemon: its load counts the requests in flight, their running tasks and
    their connections, and the keeper gives memory back once, after they end."""
    gate = tmp_path / "gate"
    cfg, tokens = config_dict(tmp_path, "home", skills=[gated_skill("held", gate)])
    async with aiohttp.ClientSession() as session:
        inst = await start_instance(tmp_path, session, cfg, tokens)
        daemon = inst.daemon
        try:
            clock, gave = Clock(), Recorded()
            keeper = HeapKeeper(daemon.load, clock=clock, give_back=gave, burst=12)
            async with aiohttp.ClientSession() as flood:
                async def hold() -> int:
                    async with flood.post(f"{inst.url}/v2/tasks", headers=inst.headers(),
                                          json={"task": "x", "skill": "held"}) as resp:
                        return resp.status

                holders = [asyncio.create_task(hold()) for _ in range(4)]
                await wait_until(lambda: daemon.engine.running == 4, what="4 tasks running")
                assert daemon.load() >= 12  # 4 in flight, 4 running, 4 connections
                assert not any(await checks(keeper, clock, 60))
                gate.touch()
                assert await asyncio.gather(*holders) == [200] * 4
            await wait_until(lambda: daemon.load() == 0, what="the burst's end")
            after = await checks(keeper, clock, QUIET_SECONDS + 60)
            assert after.count(True) == 1 and len(gave.threads) == 1
        finally:
            await daemon.stop()


class _Finalized:
    """Garbage only the collector frees (a cycle), whose finalizer says where it ran."""

    def __init__(self, ran_in: list[int]) -> None:
        self.me = self
        self.ran_in = ran_in

    def __del__(self) -> None:
        self.ran_in.append(threading.get_ident())


async def test_what_the_collection_frees_is_finalized_on_the_loop() -> None:
    """Finalizers of the burst's garbage (``__del__``, a dropped coroutine's ``finally``,
    which may release a pool's place) touch the loop's objects: they run on the loop's
    thread, never beside it; only glibc's trim runs in a worker thread."""
    clock, load = Clock(), [100]
    keeper = HeapKeeper(lambda: load[0], clock=clock, burst=32)
    ran_in: list[int] = []
    gc.disable()  # the keeper's collection, not an automatic one, frees it
    try:
        _Finalized(ran_in)
        await checks(keeper, clock, 1)
        load[0] = 0
        assert (await checks(keeper, clock, QUIET_SECONDS + 1)).count(True) == 1
    finally:
        gc.enable()
    assert ran_in == [threading.get_ident()]


async def test_a_failing_sample_is_logged_once_and_the_keeper_stops(
        caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> int:
        raise RuntimeError("no load to read")

    async with asyncio.timeout(10):  # it ends by itself, at the first sample
        await HeapKeeper(broken).run()
    failures = [r for r in caplog.records if r.name == "butler.heap"]
    assert len(failures) == 1 and "giving memory back failed" in failures[0].getMessage()
