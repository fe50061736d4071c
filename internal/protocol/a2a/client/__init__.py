"""The outbound client: Butler /v2 peers and standard A2A agents (1.0 or 0.3), over
sessions from ``internal.http.outbound_session``; for one-shot commands, the same /v2
exchange over a blocking standard-library transport (``BlockingPeerClient``).
"""

from typing import TYPE_CHECKING

from internal.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from internal.protocol.a2a.client._a2a import (
        A2APeerClient as A2APeerClient,
    )
    from internal.protocol.a2a.client._a2a import (
        Interface as Interface,
    )
    from internal.protocol.a2a.client._a2a import (
        choose_interface as choose_interface,
    )
    from internal.protocol.a2a.client._a2a import (
        offered_interfaces as offered_interfaces,
    )
    from internal.protocol.a2a.client._blocking import (
        BlockingPeerClient as BlockingPeerClient,
    )
    from internal.protocol.a2a.client._butler import PeerClient as PeerClient
    from internal.protocol.a2a.client._butler import transport_errors as transport_errors
    from internal.protocol.a2a.client._grpc_channels import GrpcChannels as GrpcChannels

# Each name is imported from its module on first use (internal/lazy_exports.py).
__all__, _getattr = lazy_exports(__name__, {
    "_a2a": ("A2APeerClient", "Interface", "choose_interface", "offered_interfaces",),
    "_blocking": ("BlockingPeerClient",),
    "_butler": ("PeerClient", "transport_errors"),
    "_grpc_channels": ("GrpcChannels",),
})
if not TYPE_CHECKING:
    __getattr__ = _getattr
