"""The outbound client: Butler /v2 peers and standard A2A agents (1.0 or 0.3).
"""

from internal.protocol.a2a.client._a2a import A2APeerClient
from internal.protocol.a2a.client._butler import PeerClient
from internal.protocol.a2a.client._http1 import Http1Pool

__all__ = [
    "A2APeerClient",
    "Http1Pool",
    "PeerClient",
]
