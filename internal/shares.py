"""Fair shares of a shared pool: no caller can hold so much of one that others are locked out.

Every pool a caller can fill (requests in flight on HTTP and gRPC together, event streams,
running tasks, MCP sessions, push configs, memory entries, registry names) has a ``Share``:
its ``total``, the most one caller may hold (``per_caller``; by default three quarters of
the total, so at least a quarter stays for everyone else) and the most all unauthenticated
clients together may hold (``anonymous``; by default an eighth). ``Share.refusal`` is the
one rule, for pools whose counts live in a store (the store counts, in the transaction that
adds); ``FairPool`` keeps the counts of an in-memory pool, checking and counting in one
synchronous step, so concurrent requests never both pass a check meant for one of them.
The defaults are the table in docs/security.md ("Fair shares").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from internal.protocol.a2a.model import Unavailable

ANONYMOUS = "anonymous"  # who a request without a token is: one caller for the shares


@dataclass(frozen=True, slots=True)
class Share:
    """A pool's size and the parts of it one caller, and all unauthenticated clients
    together, may hold. 0 for ``per_caller`` or ``anonymous``: the default part."""

    total: int
    per_caller: int = 0
    anonymous: int = 0

    @property
    def caller_limit(self) -> int:
        return min(self.total, self.per_caller or max(1, self.total * 3 // 4))

    @property
    def anonymous_limit(self) -> int:
        return min(self.caller_limit, self.anonymous or max(1, self.total // 8))

    def limit_for(self, caller: str) -> int:
        return self.anonymous_limit if caller == ANONYMOUS else self.caller_limit

    def refusal(self, what: str, caller: str, mine: int, everyone: int) -> str | None:
        """Why one more of ``what`` is refused to ``caller``, who holds ``mine`` of the
        ``everyone`` held; None when it may have it."""
        if everyone >= self.total:
            return f"all {self.total} {what} are in use"
        limit = self.limit_for(caller)
        if mine >= limit:
            return f"{caller} holds {mine} {what} (its share is {limit} of {self.total})"
        return None


class PoolFull(Unavailable):
    """A pool refused: ``rate_limited`` when the caller's own share is the limit reached
    (``mine``), else ``overloaded`` (the whole pool is full)."""

    def __init__(self, message: str, *, mine: bool, retry_after: float = 1) -> None:
        super().__init__("rate_limited" if mine else "overloaded", message,
                         retry_after=retry_after)
        self.mine = mine


class FairPool:
    def __init__(self, what: str, share: Share,
                 refuse: Callable[[PoolFull], Exception] | None = None) -> None:
        """``what``: the pool's items, as a refusal names them ("requests in flight");
        ``refuse``: the error a refusal raises instead of ``PoolFull``."""
        self.what = what
        self.share = share
        self.in_use = 0
        self._refuse = refuse
        self._by_caller: dict[str, int] = {}

    def held_by(self, caller: str) -> int:
        return self._by_caller.get(caller, 0)

    def take(self, caller: str) -> Held:
        """One place for ``caller``, to ``release`` once; raises when its share or the pool
        is full. Synchronous: the check and the count are one step under asyncio."""
        mine = self._by_caller.get(caller, 0)
        why = self.share.refusal(self.what, caller, mine, self.in_use)
        if why is not None:
            # Built by a call of its own: an exception held in a local of the frame that
            # raises it is a cycle (exception, traceback, frame) that only the collector
            # frees, with the request it refused, and a flood's refusals made that a
            # stop of the whole loop several times a second.
            raise self._refusal(why)
        self.in_use += 1
        self._by_caller[caller] = mine + 1
        return Held(self, caller)

    def _refusal(self, why: str) -> Exception:
        full = PoolFull(why, mine=self.in_use < self.share.total)
        return full if self._refuse is None else self._refuse(full)

    @contextmanager
    def hold(self, caller: str) -> Iterator[None]:
        held = self.take(caller)
        try:
            yield
        finally:
            held.release()

    def _give_back(self, caller: str) -> None:
        self.in_use -= 1
        left = self._by_caller[caller] - 1
        if left:
            self._by_caller[caller] = left
        else:
            del self._by_caller[caller]


class Held:
    """One place in a ``FairPool``, given back once however many times it is released."""

    __slots__ = ("_caller", "_pool")

    def __init__(self, pool: FairPool, caller: str) -> None:
        self._pool: FairPool | None = pool
        self._caller = caller

    def release(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool._give_back(self._caller)
