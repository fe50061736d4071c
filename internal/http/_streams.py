"""Caps on open event streams, apart from the in-flight cap on requests.

A stream can stay open for as long as its task runs. Counted as an in-flight request it
would hold a slot all that time, and a caller with enough of them locked everyone else
out. So a request that becomes a stream leaves the in-flight count (``InflightSlot``)
and takes a stream slot instead: at most ``per_caller`` for one caller and ``total`` in
all; past either, ``429 too_many_streams`` before the stream starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from aiohttp import web

from internal.protocol.a2a.model import Unavailable


@dataclass(frozen=True, slots=True)
class StreamCaps:
    total: int = 256
    per_caller: int = 32


class StreamSlots:
    def __init__(self, caps: StreamCaps) -> None:
        self.caps = caps
        self.open = 0
        self._by_caller: dict[str, int] = {}

    @contextmanager
    def hold(self, caller: str) -> Iterator[None]:
        mine = self._by_caller.get(caller, 0)
        if mine >= self.caps.per_caller:
            raise Unavailable("too_many_streams", f"{caller} already has {mine} open event "
                              f"streams (at most {self.caps.per_caller})", retry_after=1)
        if self.open >= self.caps.total:
            raise Unavailable("too_many_streams", f"{self.open} event streams are open (at "
                              f"most {self.caps.total})", retry_after=1)
        self.open += 1
        self._by_caller[caller] = mine + 1
        try:
            yield
        finally:
            self.open -= 1
            left = self._by_caller[caller] - 1
            if left:
                self._by_caller[caller] = left
            else:
                del self._by_caller[caller]


class InflightSlot:
    """A request's place in the gate's in-flight count, given back once."""

    def __init__(self, give_back: Callable[[], None]) -> None:
        self._give_back: Callable[[], None] | None = give_back

    def release(self) -> None:
        if self._give_back is not None:
            give_back, self._give_back = self._give_back, None
            give_back()


STREAM_SLOTS = web.AppKey("butler.stream_slots", StreamSlots)
INFLIGHT = web.RequestKey("butler.inflight", InflightSlot)
