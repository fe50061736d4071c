"""How much load one client may put on a daemon, on every carrier of its requests.

- ``TokenBuckets``: a rate per key (a caller, a remote address), 429 with Retry-After.
- ``LoadLimits``: the daemon's, one for the HTTP gate and the gRPC binding alike, so a
  client holds one share of the daemon whichever port it calls (not one per port). The
  remote address's bucket first (before authentication, so a flood of bad tokens is
  limited too), then a place in the in-flight pool, within the caller's share of it
  (``internal.shares``; refused with a retry hint instead of queueing).
- ``StreamSlots``: caps on open event streams, apart from the in-flight cap. A stream can
  stay open for as long as its task runs; counted as an in-flight request it would hold a
  slot all that time, and a caller with enough of them locked everyone else out. So a
  request that becomes a stream gives its in-flight place back (``INFLIGHT``) and
  takes a stream slot instead, within the caller's share of the open streams; past it,
  ``429 too_many_streams`` before the stream starts.
- ``refusal_hold``: how long a refusal waits before it is answered. A client told to
  retry later is answered no sooner than that (up to ``server.refusal_hold_seconds``):
  one that ignores ``Retry-After`` and asks again at once is refused once per hold on
  each connection instead of as fast as it can send, and the refusals' own cost (the
  parsing, the answer) no longer takes the event loop from every other caller. A held
  refusal holds no place in any pool, only its connection, of which its address has a
  share.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from aiohttp import web

from internal.protocol.a2a.model import ButlerError, Unavailable
from internal.shares import FairPool, Held, PoolFull, Share

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


def refusal_hold(err: BaseException, most: float) -> float:
    """Seconds to hold ``err``'s answer: its ``Retry-After``, at most ``most``; 0 for an
    error that is not a refusal to come back later."""
    return retry_hold(err.retry_after if isinstance(err, ButlerError) else None, most)


def retry_hold(retry_after: float | None, most: float) -> float:
    """``refusal_hold`` for an answer that keeps only its refusal's ``Retry-After``."""
    return min(float(retry_after), most) if retry_after else 0.0


def limited(what: str, wait: float) -> Unavailable:
    return Unavailable("rate_limited", f"too many requests ({what}); retry later",
                       retry_after=max(1, math.ceil(wait)))


class LoadLimits:
    def __init__(self, inflight: Share | None,
                 per_address: TokenBuckets | None = None) -> None:
        """``inflight``: the in-flight pool and each caller's share of it; None for no cap
        (a hosted agent's inner gate: the daemon's own limits already counted the request)."""
        self.pool = None if inflight is None else FairPool("requests in flight", inflight)
        self.per_address = per_address

    @property
    def inflight(self) -> int:
        return 0 if self.pool is None else self.pool.in_use

    def address(self, remote: str) -> None:
        """Takes from ``remote``'s bucket; ``rate_limited`` when it is empty."""
        if self.per_address is not None:
            wait = self.per_address.take(remote)
            if wait:
                raise limited("per address", wait)

    def enter(self, caller: str) -> Held | None:
        """A place in the in-flight count for ``caller``, to release once the request is
        answered (or becomes a stream); None when nothing is capped. Past the caller's
        share, 429 ``rate_limited``; past the pool, 503 ``overloaded``."""
        return None if self.pool is None else self.pool.take(caller)


def _too_many_streams(full: PoolFull) -> Unavailable:
    return Unavailable("too_many_streams", full.message, retry_after=1)


class StreamSlots(FairPool):
    """Open event streams: a share per caller of ``max_streams``."""

    def __init__(self, share: Share) -> None:
        super().__init__("open event streams", share, _too_many_streams)


STREAM_SLOTS = web.AppKey("butler.stream_slots", StreamSlots)
INFLIGHT = web.RequestKey("butler.inflight", Held)
