"""How much load one client may put on a daemon, on every carrier of its requests.

- ``TokenBuckets``: a rate per key (a caller, a remote address), 429 with Retry-After.
- ``LoadLimits``: the daemon's, one for the HTTP gate and the gRPC binding alike, so a
  client holds one share of the daemon whichever port it calls (not one per port). The
  remote address's bucket first (before authentication, so a flood of bad tokens is
  limited too), then a place in the in-flight count (refused with ``overloaded`` and a
  retry hint, instead of queueing).
- ``StreamSlots``: caps on open event streams, apart from the in-flight cap. A stream can
  stay open for as long as its task runs; counted as an in-flight request it would hold a
  slot all that time, and a caller with enough of them locked everyone else out. So a
  request that becomes a stream gives its in-flight place back (``InflightSlot``) and
  takes a stream slot instead: at most ``per_caller`` for one caller and ``total`` in all;
  past either, ``429 too_many_streams`` before the stream starts.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from aiohttp import web

from internal.protocol.a2a.model import Unavailable

MAX_TRACKED = 10_000


class TokenBuckets:
    """``rate`` requests per second with bursts of ``burst``, per key; least recently seen
    keys are forgotten past ``MAX_TRACKED`` so a flood of addresses cannot grow memory."""

    def __init__(self, rate: float, burst: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, key: str) -> float:
        """0 if allowed, else the seconds until a request would be."""
        now = self._clock()
        tokens, stamp = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - stamp) * self.rate)
        if tokens >= 1:
            self._buckets[key] = (tokens - 1, now)
            wait = 0.0
        else:
            self._buckets[key] = (tokens, now)
            wait = (1 - tokens) / self.rate if self.rate > 0 else 60.0
        while len(self._buckets) > MAX_TRACKED:
            self._buckets.popitem(last=False)
        return wait


def limited(what: str, wait: float) -> Unavailable:
    return Unavailable("rate_limited", f"too many requests ({what}); retry later",
                       retry_after=max(1, math.ceil(wait)))


class LoadLimits:
    def __init__(self, max_inflight: int | None,
                 per_address: TokenBuckets | None = None) -> None:
        """``max_inflight``: None for no cap (a hosted agent's inner gate: the daemon's
        own limits already counted the request)."""
        self.max_inflight = max_inflight
        self.per_address = per_address
        self.inflight = 0

    def address(self, remote: str) -> None:
        """Takes from ``remote``'s bucket; ``rate_limited`` when it is empty."""
        if self.per_address is not None:
            wait = self.per_address.take(remote)
            if wait:
                raise limited("per address", wait)

    def enter(self) -> InflightSlot | None:
        """A place in the in-flight count, to release once the request is answered (or
        becomes a stream); None when nothing is capped."""
        if self.max_inflight is None:
            return None
        if self.inflight >= self.max_inflight:
            raise Unavailable("overloaded", "too many requests in flight", retry_after=1)
        self.inflight += 1
        return InflightSlot(self._give_back)

    def _give_back(self) -> None:
        self.inflight -= 1


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
