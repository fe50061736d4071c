"""A port's open connections: at most ``server.max_connections`` at once, one address at
most its share of them (``server.max_connections_per_address``), each refusal reported as
a ``connection_cap`` incident (rate-limited by the incident log). One mechanism for every
port: the HTTP listener, the metrics port and the gRPC front each keep one of these."""

from __future__ import annotations

import asyncio

from internal.http._incidents import CONNECTION_CAP, IncidentLog
from internal.shares import FairPool, Held, PoolFull, Share


class PortConnections:
    def __init__(self, cap: int, per_address: int | None, incidents: IncidentLog) -> None:
        """``per_address``: one address's part (None or 0: the shares' default, three
        quarters of ``cap``)."""
        self.cap = cap
        self.incidents = incidents
        self._pool = FairPool("connections", Share(cap, per_address or 0, per_address or 0))

    @property
    def in_use(self) -> int:
        return self._pool.in_use

    def held_by(self, address: str) -> int:
        return self._pool.held_by(address)

    def take(self, address: str) -> Held | None:
        """A place for a connection from ``address``, counted and checked in one step;
        None (and an incident reported) when the port or the address's share is full."""
        try:
            return self._pool.take(address)
        except PoolFull as full:
            key = ("server.max_connections_per_address" if full.mine
                   else "server.max_connections")
            self.incidents.report(CONNECTION_CAP, f"refused a connection from {address}: "
                                  f"{full.message} ({key})")
            return None


def peer_address(transport: asyncio.BaseTransport | None) -> str:
    """The remote address of a connection, as aiohttp names a request's remote: the
    key of its share."""
    peer = transport.get_extra_info("peername") if transport is not None else None
    return str(peer[0]) if isinstance(peer, tuple) and peer else "an unknown address"
