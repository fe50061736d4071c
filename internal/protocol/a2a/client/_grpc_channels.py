"""The open gRPC channels of one delegator, one per peer interface, reused delegation
after delegation instead of a channel (and a TLS handshake) per call.

At most ``size`` are kept: past it, the least recently used is closed once no call holds
it. ``aclose`` closes them all (with the delegator's sessions). Free of ``grpc`` itself:
a channel is opened (``_grpc``, the ``grpc`` extra) only when a peer's best interface is
gRPC."""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from internal.http import ConnectionCheck, OutboundGuard

if TYPE_CHECKING:
    from internal.protocol.a2a.client._grpc import GrpcTransport, PeerChannel


@dataclass(eq=False)
class _Held:
    channel: PeerChannel
    users: int = 0
    dropped: bool = False  # no longer in the cache: closed when its last user is done


class GrpcChannels:
    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._open: OrderedDict[Hashable, _Held] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    @contextlib.asynccontextmanager
    async def peer(self, url: str, token: str, *, peer_url: str, name: str,
                   guard: OutboundGuard | None, ca_file: Path | None,
                   max_response_bytes: int, connect_timeout: float,
                   check: ConnectionCheck | None = None) -> AsyncIterator[GrpcTransport]:
        """The peer over its kept channel (opened now if there is none), ``check`` awaited
        before the channel connects. The guard is part of the key: a channel judged under
        one set of rules serves only those."""
        from internal.protocol.a2a.client._grpc import GrpcTransport, PeerChannel

        key = (url, peer_url, guard, ca_file, max_response_bytes, connect_timeout)
        held = self._open.pop(key, None)
        if held is None:
            held = _Held(await PeerChannel.open(
                url, peer_url=peer_url, name=name, guard=guard, ca_file=ca_file,
                max_response_bytes=max_response_bytes, connect_timeout=connect_timeout))
        self._open[key] = held  # the most recently used last
        held.users += 1
        try:
            await self._trim()
            yield GrpcTransport(held.channel, token, name, check)
        finally:
            held.users -= 1
            if held.dropped and not held.users:
                await held.channel.close()

    async def _trim(self) -> None:
        while len(self._open) > self.size:
            _, oldest = self._open.popitem(last=False)
            oldest.dropped = True
            if not oldest.users:
                await oldest.channel.close()

    async def aclose(self) -> None:
        held, self._open = list(self._open.values()), OrderedDict()
        for one in held:
            one.dropped = True
            if not one.users:
                await one.channel.close()
