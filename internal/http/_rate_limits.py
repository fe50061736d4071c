"""Token-bucket rate limits per caller identity and per remote address (429 + Retry-After)."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

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
