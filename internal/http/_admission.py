"""The daemon's admission, one for every carrier of its requests: the HTTP gate and the
gRPC binding take from the same per-address buckets and the same in-flight count, so a
client holds one share of the daemon whichever port it calls (not one per port).

The order is the gate's: the remote address's bucket first (before authentication, so a
flood of bad tokens is limited too), then a place in the in-flight count (refused with
``overloaded`` and a retry hint, instead of queueing). A request that becomes an event
stream gives its place back (``InflightSlot.release``) and takes a stream slot instead
(``_streams``)."""

from __future__ import annotations

from internal.http._rate_limits import TokenBuckets, limited
from internal.http._streams import InflightSlot
from internal.protocol.a2a.model import Unavailable


class Admission:
    def __init__(self, max_inflight: int | None,
                 per_address: TokenBuckets | None = None) -> None:
        """``max_inflight``: None for no cap (a hosted agent's inner gate: the daemon's
        own admission already counted the request)."""
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
