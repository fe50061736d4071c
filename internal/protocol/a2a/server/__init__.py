"""The bindings: aiohttp handlers for Butler /v2, A2A 1.0 JSON-RPC (with the 0.3
methods) and A2A HTTP+JSON, the agent card route, and the JSON-RPC dispatcher other carriers
(stdio) share, over the engine interface
(``TaskService``, ``PushService``) that the daemon implements.
"""

from internal.protocol.a2a.server._a2a_http_json import A2ARestBinding
from internal.protocol.a2a.server._butler_rest import (
    BUTLER_V2,
    BUTLER_V2_PATH,
    RestBinding,
    RestLimits,
    event_frame,
)
from internal.protocol.a2a.server._card_route import CardRoute
from internal.protocol.a2a.server._jsonrpc import (
    Answer,
    JsonRpcBinding,
    JsonRpcDispatcher,
    JsonRpcLimits,
    V03Dialect,
    V1Dialect,
)
from internal.protocol.a2a.server._operations import A2AOperations
from internal.protocol.a2a.server._service import PushService, TaskService

__all__ = [
    "BUTLER_V2",
    "BUTLER_V2_PATH",
    "A2AOperations",
    "A2ARestBinding",
    "Answer",
    "CardRoute",
    "JsonRpcBinding",
    "JsonRpcDispatcher",
    "JsonRpcLimits",
    "PushService",
    "RestBinding",
    "RestLimits",
    "TaskService",
    "V03Dialect",
    "V1Dialect",
    "event_frame",
]
