"""HTTP plumbing shared by the daemon and the registry: the listener and its limits,
the request gate (auth, rate limits, in-flight cap), JSON bodies and errors as JSON,
the incident log, server-sent events, OpenAPI documents and static pages; on the way out, the one
outbound guard and the one place outbound sessions are built.
"""

from internal.http._auth import TokenEntry, TokenVerifier, hash_token, new_token
from internal.http._documents import document_route, load
from internal.http._gate import gate_middleware
from internal.http._incidents import INCIDENTS, IncidentLog
from internal.http._json_http import (
    ERROR_RENDERERS,
    IDENTITY,
    ErrorRenderer,
    Handler,
    error_headers,
    error_middleware,
    identity_of,
    json_bytes_response,
    json_response,
    read_body,
    read_json,
)
from internal.http._listener import ListenSettings, listen
from internal.http._outbound import outbound_session
from internal.http._outbound_guard import (
    CONFIGURED,
    OutboundGuard,
    OutboundRules,
    ResolverFactory,
    embedded_ipv4,
    ip_literal,
)
from internal.http._pages import StaticPage
from internal.http._rate_limits import TokenBuckets, limited
from internal.http._sse import SseTiming, sse_frame, sse_stream
from internal.http._streams import STREAM_SLOTS, StreamCaps, StreamSlots

__all__ = [
    "CONFIGURED",
    "ERROR_RENDERERS",
    "IDENTITY",
    "INCIDENTS",
    "STREAM_SLOTS",
    "ErrorRenderer",
    "Handler",
    "IncidentLog",
    "ListenSettings",
    "OutboundGuard",
    "OutboundRules",
    "ResolverFactory",
    "SseTiming",
    "StaticPage",
    "StreamCaps",
    "StreamSlots",
    "TokenBuckets",
    "TokenEntry",
    "TokenVerifier",
    "document_route",
    "embedded_ipv4",
    "error_headers",
    "error_middleware",
    "gate_middleware",
    "hash_token",
    "identity_of",
    "ip_literal",
    "json_bytes_response",
    "json_response",
    "limited",
    "listen",
    "load",
    "new_token",
    "outbound_session",
    "read_body",
    "read_json",
    "sse_frame",
    "sse_stream",
]
