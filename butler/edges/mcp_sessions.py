"""``/mcp`` sessions within each caller's share (``shares.mcp_sessions``).

An idle session lives for ``SESSION_IDLE_SECONDS``: without a share, one token could open
the SDK's whole ``max_sessions`` and every other caller's ``initialize`` was refused. A
request that would open a session takes a place for its caller before the SDK sees it
(``SessionPlaces.opening``: refused there with the daemon's JSON error); the SDK's session
manager adopts the place when it registers the session and gives it back however the
session ends (DELETE, idle timeout, a failed opening request).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from internal.shares import FairPool, Held, Share

# The place the request being served took, until the session manager adopts it.
_OPENING: ContextVar[list[Held] | None] = ContextVar("butler_mcp_opening", default=None)


class SessionPlaces:
    def __init__(self, share: Share) -> None:
        self.pool = FairPool("MCP sessions", share)

    @contextlib.contextmanager
    def opening(self, caller: str) -> Iterator[None]:
        """Around a request that opens a session: its place, given back unless a session
        was registered with it."""
        held = [self.pool.take(caller)]
        token = _OPENING.set(held)
        try:
            yield
        finally:
            _OPENING.reset(token)
            for place in held:
                place.release()


def shared_manager(**kwargs: Any) -> Any:
    """The SDK's session manager, each session holding its opener's place: its two session
    hooks (registration and discarding; mcp 2.3) overridden. Imports the SDK."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    class SharedSessionManager(StreamableHTTPSessionManager):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._places: dict[str, Held] = {}

        def _admit_session(self, requestor: Any) -> Any:
            held = _OPENING.get()
            if not held:  # only ``SessionPlaces.opening`` lets a request get here
                return None
            transport = super()._admit_session(requestor)
            if transport is not None and transport.mcp_session_id is not None:
                self._places[transport.mcp_session_id] = held.pop()
            return transport

        async def _discard_session(self, session_id: str, transport: Any) -> None:
            place = self._places.pop(session_id, None)
            if place is not None:
                place.release()
            await super()._discard_session(session_id, transport)

    return SharedSessionManager(**kwargs)
