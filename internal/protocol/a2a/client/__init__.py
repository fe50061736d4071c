"""The one outbound client (``A2AClient``) with one transport per binding: Butler /v2
(``V2Transport``), A2A JSON-RPC and HTTP+JSON (``_http_bindings``) and gRPC (``_grpc``,
channels kept by ``GrpcChannels``), over sessions from ``internal.http.outbound_session``;
for one-shot commands, the /v2 exchange over a blocking standard-library transport
(``BlockingV2Transport``). ``PeerUpdate``: what a caller's ``watch`` is told of the peer's
task of a call (``PeerTask``, where it runs: what ``A2AClient.cancel`` needs).
"""

from typing import TYPE_CHECKING

from internal.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from internal.protocol.a2a.client._a2a import (
        A2AClient as A2AClient,
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
        BlockingV2Transport as BlockingV2Transport,
    )
    from internal.protocol.a2a.client._grpc_channels import GrpcChannels as GrpcChannels
    from internal.protocol.a2a.client._message import PeerTracking as PeerTracking
    from internal.protocol.a2a.client._message import PeerUpdate as PeerUpdate
    from internal.protocol.a2a.client._message import PeerWatch as PeerWatch
    from internal.protocol.a2a.client._v2 import V2Transport as V2Transport
    from internal.protocol.a2a.client._v2 import transport_errors as transport_errors

# Each name is imported from its module on first use (internal/lazy_exports.py).
__all__, _getattr = lazy_exports(__name__, {
    "_a2a": ("A2AClient", "Interface", "choose_interface",
             "offered_interfaces",),
    "_blocking": ("BlockingV2Transport",),
    "_grpc_channels": ("GrpcChannels",),
    "_message": ("PeerTracking", "PeerUpdate", "PeerWatch"),
    "_v2": ("V2Transport", "transport_errors"),
})
if not TYPE_CHECKING:
    __getattr__ = _getattr
