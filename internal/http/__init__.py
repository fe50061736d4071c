"""HTTP plumbing shared by the daemon and the registry: the listener and its limits,
the request gate (auth, rate limits, in-flight cap) and the load limits it shares
with the gRPC binding, JSON bodies and errors as JSON, the incident log, server-sent events,
OpenAPI documents and static pages; on the way out, the one outbound guard and the one
place outbound sessions are built.
"""

from typing import TYPE_CHECKING

from internal.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from internal.http._accepting import ListenSettings as ListenSettings
    from internal.http._accepting import Port as Port
    from internal.http._answers import AnswerTooLarge as AnswerTooLarge
    from internal.http._answers import Capped as Capped
    from internal.http._answers import SseEvent as SseEvent
    from internal.http._answers import SseParser as SseParser
    from internal.http._answers import capped as capped
    from internal.http._answers import read_capped as read_capped
    from internal.http._answers import sse_events as sse_events
    from internal.http._connections import PortConnections as PortConnections
    from internal.http._documents import (
        document_route as document_route,
    )
    from internal.http._documents import (
        load as load,
    )
    from internal.http._gate import TokenEntry as TokenEntry
    from internal.http._gate import TokenVerifier as TokenVerifier
    from internal.http._gate import gate_middleware as gate_middleware
    from internal.http._gate import hash_token as hash_token
    from internal.http._gate import new_token as new_token
    from internal.http._incidents import (
        INCIDENTS as INCIDENTS,
    )
    from internal.http._incidents import (
        IncidentLog as IncidentLog,
    )
    from internal.http._incidents import (
        QuietRefusals as QuietRefusals,
    )
    from internal.http._json_http import (
        ERROR_RENDERERS as ERROR_RENDERERS,
    )
    from internal.http._json_http import (
        IDENTITY as IDENTITY,
    )
    from internal.http._json_http import (
        REFUSAL_HOLD as REFUSAL_HOLD,
    )
    from internal.http._json_http import (
        ErrorRenderer as ErrorRenderer,
    )
    from internal.http._json_http import (
        Handler as Handler,
    )
    from internal.http._json_http import (
        error_headers as error_headers,
    )
    from internal.http._json_http import (
        error_middleware as error_middleware,
    )
    from internal.http._json_http import (
        hold_refusal as hold_refusal,
    )
    from internal.http._json_http import (
        identity_of as identity_of,
    )
    from internal.http._json_http import (
        json_bytes_response as json_bytes_response,
    )
    from internal.http._json_http import (
        json_response as json_response,
    )
    from internal.http._json_http import (
        read_body as read_body,
    )
    from internal.http._json_http import (
        read_json as read_json,
    )
    from internal.http._json_http import (
        render_error as render_error,
    )
    from internal.http._listener import (
        listen as listen,
    )
    from internal.http._load_limits import (
        STREAM_SLOTS as STREAM_SLOTS,
    )
    from internal.http._load_limits import (
        LoadLimits as LoadLimits,
    )
    from internal.http._load_limits import (
        StreamSlots as StreamSlots,
    )
    from internal.http._load_limits import (
        TokenBuckets as TokenBuckets,
    )
    from internal.http._load_limits import (
        limited as limited,
    )
    from internal.http._load_limits import (
        refusal_hold as refusal_hold,
    )
    from internal.http._origins import OriginPolicy as OriginPolicy
    from internal.http._origins import host_name as host_name
    from internal.http._outbound import ConnectionCheck as ConnectionCheck
    from internal.http._outbound import outbound_session as outbound_session
    from internal.http._outbound_guard import (
        CONFIGURED as CONFIGURED,
    )
    from internal.http._outbound_guard import (
        OutboundGuard as OutboundGuard,
    )
    from internal.http._outbound_guard import (
        OutboundRules as OutboundRules,
    )
    from internal.http._outbound_guard import (
        ResolverFactory as ResolverFactory,
    )
    from internal.http._outbound_guard import (
        embedded_ipv4 as embedded_ipv4,
    )
    from internal.http._outbound_guard import (
        ip_literal as ip_literal,
    )
    from internal.http._pages import StaticPage as StaticPage
    from internal.http._sse import (
        SseTiming as SseTiming,
    )
    from internal.http._sse import (
        sse_frame as sse_frame,
    )
    from internal.http._sse import (
        sse_stream as sse_stream,
    )
    from internal.http._tcp_front import HTTP2_PREFACE as HTTP2_PREFACE
    from internal.http._tcp_front import TLS_RECORD as TLS_RECORD
    from internal.http._tcp_front import RelayedPeers as RelayedPeers
    from internal.http._tcp_front import TcpFront as TcpFront

# Each name is imported from its module on first use (internal/lazy_exports.py).
__all__, _getattr = lazy_exports(__name__, {
    "_accepting": ("ListenSettings", "Port"),
    "_answers": (
        "AnswerTooLarge", "Capped", "SseEvent", "SseParser", "capped", "read_capped",
        "sse_events",
    ),
    "_documents": ("document_route", "load",),
    "_gate": ("TokenEntry", "TokenVerifier", "gate_middleware", "hash_token", "new_token",),
    "_incidents": ("INCIDENTS", "IncidentLog", "QuietRefusals",),
    "_json_http": (
        "ERROR_RENDERERS", "IDENTITY", "REFUSAL_HOLD", "ErrorRenderer", "Handler", "error_headers",
        "error_middleware", "hold_refusal", "identity_of", "json_bytes_response",
        "json_response", "read_body", "read_json", "render_error",
    ),
    "_listener": ("listen",),
    "_connections": ("PortConnections",),
    "_tcp_front": ("HTTP2_PREFACE", "TLS_RECORD", "RelayedPeers", "TcpFront",),
    "_origins": ("OriginPolicy", "host_name",),
    "_outbound": ("ConnectionCheck", "outbound_session",),
    "_load_limits": (
        "STREAM_SLOTS", "LoadLimits", "StreamSlots", "TokenBuckets",
        "limited", "refusal_hold",
    ),
    "_outbound_guard": (
        "CONFIGURED", "OutboundGuard", "OutboundRules", "ResolverFactory", "embedded_ipv4",
        "ip_literal",
    ),
    "_pages": ("StaticPage",),
    "_sse": ("SseTiming", "sse_frame", "sse_stream",),
})
if not TYPE_CHECKING:
    __getattr__ = _getattr
