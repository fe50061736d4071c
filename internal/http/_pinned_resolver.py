"""Step 2 of the outbound guard in an aiohttp session: the connector's resolver, which
hands aiohttp only addresses the guard judged (``OutboundGuard.check_addresses``).

Apart from the guard so that a client without aiohttp (the CLI's blocking transport) can
use the guard without importing aiohttp.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

Check = Callable[[str, Sequence[str]], None]


def system_resolver() -> AbstractResolver:
    return DefaultResolver()


class PinnedResolver(AbstractResolver):
    """Resolves through the inner resolver, then refuses the connection unless every
    address passes ``check``: what aiohttp connects to is what was judged."""

    def __init__(self, check: Check, inner: AbstractResolver, guard: str) -> None:
        self._check = check
        self._inner = inner
        self._guard = guard

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)  # OSError: unreachable
        self._check(host, [result["host"] for result in results])
        return results

    async def close(self) -> None:
        await self._inner.close()

    def __repr__(self) -> str:
        return f"PinnedResolver({self._guard})"
