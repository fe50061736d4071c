"""A check that runs before a request opens a new connection, and only then.

A caller that must know who is at the other end before it sends something (a peer's
token: ``butler/delegation/peer_identity.py``) needs that once per connection, not once
per request: a connection reaches one process, and a kept-alive one reaches the process
that was there when it was opened. ``before_new_connections(check)`` sets ``check`` for
the requests made in the current context (the task, and tasks it starts); a session
built with ``outbound_session(..., new_connection_checks=True)`` awaits it when one of
those requests is about to open a connection (aiohttp's ``on_connection_create_start``,
before the connection is made and before anything is written on it), and not when the
request takes a kept-alive connection from the pool. An exception from ``check`` ends
the request with that exception. A connection made outside aiohttp (a gRPC channel)
calls ``new_connection()`` itself.

The check's own requests (reading a card) run with no check set, so they never recurse.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from types import SimpleNamespace

import aiohttp

NewConnectionCheck = Callable[[], Awaitable[None]]
_CHECK: ContextVar[NewConnectionCheck | None] = ContextVar("new_connection_check",
                                                           default=None)


@contextlib.contextmanager
def before_new_connections(check: NewConnectionCheck) -> Iterator[None]:
    reset = _CHECK.set(check)
    try:
        yield
    finally:
        _CHECK.reset(reset)


async def new_connection() -> None:
    """Runs the current context's check, if any: a new connection is about to be made."""
    check = _CHECK.get()
    if check is None:
        return
    reset = _CHECK.set(None)
    try:
        await check()
    finally:
        _CHECK.reset(reset)


async def _on_create(session: aiohttp.ClientSession, context: SimpleNamespace,
                     params: aiohttp.TraceConnectionCreateStartParams) -> None:
    await new_connection()


def new_connection_tracing() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(_on_create)
    return trace
