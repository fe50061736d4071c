"""The outbound client: Butler /v2 peers and standard A2A agents (1.0 or 0.3), over
sessions from ``internal.http.outbound_session``.
"""

from internal.protocol.a2a.client._a2a import (
    A2APeerClient,
    Interface,
    choose_interface,
    offered_interfaces,
)
from internal.protocol.a2a.client._butler import PeerClient, transport_errors

__all__ = [
    "A2APeerClient",
    "Interface",
    "PeerClient",
    "choose_interface",
    "offered_interfaces",
    "transport_errors",
]
