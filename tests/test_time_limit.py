"""``within``: a run's time limit, armed only once the run waits, acts as
``asyncio.timeout`` does: results, errors, cancellation and the limit itself."""

from __future__ import annotations

import asyncio

import pytest

from butler.engine.time_limit import within


async def test_a_coroutine_that_never_waits_gets_its_result_and_no_timer() -> None:
    async def at_once() -> str:
        return "done"

    loop = asyncio.get_running_loop()
    timers = len(loop._scheduled)  # type: ignore[attr-defined]
    assert await within(at_once(), 5) == "done"
    assert len(loop._scheduled) == timers  # type: ignore[attr-defined]


async def test_waits_are_resumed_with_what_they_waited_for() -> None:
    loop = asyncio.get_running_loop()

    async def twice() -> int:
        first: asyncio.Future[int] = loop.create_future()
        loop.call_soon(first.set_result, 1)
        await asyncio.sleep(0)  # a bare yield, then a future
        return await first + 1

    assert await within(twice(), 5) == 2


async def test_errors_come_out_as_they_went_in() -> None:
    async def at_once() -> None:
        raise KeyError("first step")

    async def later() -> None:
        await asyncio.sleep(0)
        raise ValueError("after waiting")

    async def own_timeout() -> None:
        raise TimeoutError("the skill's own")

    with pytest.raises(KeyError):
        await within(at_once(), 5)
    with pytest.raises(ValueError, match="after waiting"):
        await within(later(), 5)
    with pytest.raises(TimeoutError, match="the skill's own"):
        await within(own_timeout(), 5)


async def test_past_the_limit_the_waiting_coroutine_is_cancelled_and_it_is_a_timeout() -> None:
    cancelled = asyncio.Event()
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def stuck() -> None:
        try:
            await asyncio.sleep(0)
            await never
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(TimeoutError):
        await within(stuck(), 0.01)
    assert cancelled.is_set()
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_cancel_from_outside_is_a_cancel_not_a_timeout() -> None:
    started, cleaned = asyncio.Event(), asyncio.Event()
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def waits() -> None:
        started.set()
        try:
            await never
        finally:
            cleaned.set()

    run = asyncio.create_task(within(waits(), 60))
    await started.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert cleaned.is_set() and never.cancelled()


async def test_a_coroutine_may_catch_the_cancel_and_go_on_waiting() -> None:
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    second: asyncio.Future[str] = loop.create_future()

    async def stubborn() -> str:
        started.set()
        try:
            await loop.create_future()
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        return await second

    run = asyncio.create_task(within(stubborn(), 60))
    await started.wait()
    run.cancel()
    second.set_result("went on")
    assert await run == "went on"
