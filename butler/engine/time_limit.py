"""A run's time limit, its timer armed only once the run has to wait.

``asyncio.timeout`` puts a timer on the loop's heap for every run, and takes it off
again: with its ``__aenter__`` and ``__aexit__``, about 40,000 instructions a task under
load (docs/performance.md), more than the whole skill of many local tasks, which end in
their first step without ever waiting (an echo, a transform). ``within`` takes that
first step itself, and only a run that then waits gets the timer, with the same
deadline. Nothing a skill can see changes: a time limit acts at an ``await`` either way,
and the first step runs in the run's own task, as it would under ``await``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


async def within(coro: Coroutine[Any, Any, T], seconds: float) -> T:
    """``await coro`` under ``asyncio.timeout(seconds)``; ``TimeoutError`` past it."""
    deadline = asyncio.get_running_loop().time() + seconds
    try:
        waiting_on = coro.send(None)
    except StopIteration as done:  # finished without waiting: no timer was needed
        result: T = done.value
        return result
    async with asyncio.timeout_at(deadline):
        return await _Resumed(coro, waiting_on)


class _Resumed(Generic[T]):
    """Awaits a coroutine already past its first step, which waits on ``waiting_on``:
    hands that to the task as the coroutine would have, then resumes the coroutine
    (``yield from``, as ``await`` does). A cancellation that comes first is thrown into
    the coroutine where it waits, as under ``await``."""

    __slots__ = ("_coro", "_waiting_on")

    def __init__(self, coro: Coroutine[Any, Any, T], waiting_on: Any) -> None:
        self._coro = coro
        self._waiting_on = waiting_on

    def __await__(self) -> Generator[Any, None, T]:
        coro, waiting_on = self._coro, self._waiting_on
        while True:
            try:
                yield waiting_on
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                try:
                    waiting_on = coro.throw(exc)
                except StopIteration as done:
                    result: T = done.value
                    return result
                continue
            # A task resumes what it awaits with None, which ``yield from`` sends first.
            return (yield from coro.__await__())
