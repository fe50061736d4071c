"""The one error tree, organised by what the caller (or the operator) can do about it.

    ButlerError
     ├── RequestError      the request is wrong: fix it, never retry        (4xx)
     │    └── OutboundRefused  the outbound guard will not call this URL
     ├── AuthError         who you are, or what you may do                  (401, 403)
     ├── Refusal           swarm safety said no: never retry                (402, 409, 422)
     ├── StateConflict     the task is not in a state that allows this      (409)
     ├── Unavailable       try again later                                  (429, 503)
     ├── DelegationFailed  a peer (or the registry) could not do what was asked
     ├── TaskFailed        the work itself failed: a task outcome with the skill's own code
     └── SetupError        this instance is set up wrongly (config, plugin, data folder,
                           a stored file): the operator fixes it; start-up exits 2

The first five are answers on the wire. The last three are not meant to be: a failed
delegation or skill ends its task, a setup error stops the daemon. Every machine-readable
code a class may carry appears once in ``ERROR_TABLE`` with its HTTP status, JSON-RPC code
and google.rpc status; handlers never pick statuses themselves. Classes whose codes come
from elsewhere (a skill's own codes, a registry's answers) name a ``fallback_code`` whose
row stands for them should one ever reach the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

A2A_DOMAIN = "a2a-protocol.org"
BUTLER_DOMAIN = "butler"


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    status: int
    rpc_code: int
    category: str
    reason: str = ""  # the A2A ErrorInfo reason, for errors the A2A specification defines
    grpc: str = field(default="", kw_only=True)  # google.rpc.Code name (A2A HTTP+JSON)
    # Bare HTTP statuses (from aiohttp, before any handler ran) this code answers for.
    for_http: tuple[int, ...] = field(default=(), kw_only=True)

    def error_info(self, code: str) -> tuple[str, str]:
        """(reason, domain) of the ``google.rpc.ErrorInfo`` the A2A bindings send."""
        return (self.reason, A2A_DOMAIN) if self.reason else (code.upper(), BUTLER_DOMAIN)


_ARG = "INVALID_ARGUMENT"
_PRE = "FAILED_PRECONDITION"
_DENIED = "PERMISSION_DENIED"
_UNIMPL = "UNIMPLEMENTED"

# code -> (HTTP status, JSON-RPC code, category, A2A reason, google.rpc status). JSON-RPC
# codes -32700..-32600 are JSON-RPC 2.0's, -32001..-32009 the A2A specification's;
# Butler's own errors use -31xxx, where xxx is the HTTP status (docs/errors.md).
ERROR_TABLE: dict[str, ErrorSpec] = {
    "malformed_json": ErrorSpec(400, -32700, "request", "INVALID_REQUEST", grpc=_ARG),
    "invalid_request": ErrorSpec(400, -32600, "request", "INVALID_REQUEST", grpc=_ARG,
                                 for_http=(400,)),
    "invalid_params": ErrorSpec(400, -32602, "request", "INVALID_PARAMS", grpc=_ARG),
    "invalid_signature": ErrorSpec(400, -32602, "request", grpc=_ARG),
    "invalid_envelope": ErrorSpec(400, -32602, "request", grpc=_ARG),
    "not_found": ErrorSpec(404, -32601, "request", "METHOD_NOT_FOUND", grpc="NOT_FOUND",
                           for_http=(404,)),
    "method_not_found": ErrorSpec(404, -32601, "request", "METHOD_NOT_FOUND", grpc="NOT_FOUND"),
    "task_not_found": ErrorSpec(404, -32001, "request", "TASK_NOT_FOUND", grpc="NOT_FOUND"),
    "method_not_allowed": ErrorSpec(405, -32601, "request", grpc=_UNIMPL, for_http=(405,)),
    "payload_too_large": ErrorSpec(413, -32600, "request", grpc=_ARG, for_http=(413,)),
    "unsupported_media_type": ErrorSpec(415, -32005, "request", "CONTENT_TYPE_NOT_SUPPORTED",
                                        grpc=_ARG, for_http=(415,)),
    "content_type_not_supported": ErrorSpec(415, -32005, "request",
                                            "CONTENT_TYPE_NOT_SUPPORTED", grpc=_ARG),
    "header_too_large": ErrorSpec(400, -32600, "request", grpc=_ARG, for_http=(431,)),
    "push_notification_not_supported": ErrorSpec(400, -32003, "request",
                                                 "PUSH_NOTIFICATION_NOT_SUPPORTED", grpc=_UNIMPL),
    "unsupported_operation": ErrorSpec(400, -32004, "request", "UNSUPPORTED_OPERATION",
                                       grpc=_UNIMPL),
    "extended_card_not_configured": ErrorSpec(400, -32007, "request",
                                              "EXTENDED_AGENT_CARD_NOT_CONFIGURED", grpc=_ARG),
    "extension_support_required": ErrorSpec(400, -32008, "request",
                                            "EXTENSION_SUPPORT_REQUIRED", grpc=_ARG),
    "version_not_supported": ErrorSpec(400, -32009, "request", "VERSION_NOT_SUPPORTED",
                                       grpc=_UNIMPL),
    "request_timeout": ErrorSpec(408, -32600, "request", grpc="DEADLINE_EXCEEDED",
                                 for_http=(408,)),
    "outbound_refused": ErrorSpec(400, -32602, "request", grpc=_ARG),
    "misdirected_request": ErrorSpec(421, -32600, "request", grpc=_ARG, for_http=(421,)),
    "unauthenticated": ErrorSpec(401, -31401, "auth", grpc="UNAUTHENTICATED"),
    "forbidden": ErrorSpec(403, -31403, "auth", grpc=_DENIED),
    "origin_refused": ErrorSpec(403, -31403, "auth", grpc=_DENIED),
    "chain_mismatch": ErrorSpec(403, -31403, "auth", grpc=_DENIED),
    "name_owned": ErrorSpec(403, -31403, "auth", grpc=_DENIED),
    "key_change_refused": ErrorSpec(403, -31403, "auth", grpc=_DENIED),
    "name_quota_exceeded": ErrorSpec(403, -31403, "auth", grpc=_DENIED),
    "loop_detected": ErrorSpec(409, -31409, "refusal", grpc=_PRE),
    "depth_exceeded": ErrorSpec(422, -31422, "refusal", grpc=_PRE),
    "budget_exhausted": ErrorSpec(402, -31402, "refusal", grpc=_PRE),
    # A caller's own caps across trees (configurations.a2a token limits): Retry-After says
    # when its window has room again.
    "spend_limit_reached": ErrorSpec(402, -31402, "refusal", grpc="RESOURCE_EXHAUSTED"),
    "task_terminal": ErrorSpec(409, -32004, "state", grpc=_PRE),
    "task_not_cancelable": ErrorSpec(409, -32002, "state", "TASK_NOT_CANCELABLE", grpc=_PRE),
    "task_not_waiting": ErrorSpec(409, -32004, "state", grpc=_PRE),
    "agent_exists": ErrorSpec(409, -32004, "state", grpc="ALREADY_EXISTS"),
    "too_many_agents": ErrorSpec(409, -32004, "state", grpc="RESOURCE_EXHAUSTED"),
    "rate_limited": ErrorSpec(429, -31429, "unavailable", grpc="RESOURCE_EXHAUSTED"),
    "overloaded": ErrorSpec(503, -31503, "unavailable", grpc="UNAVAILABLE"),
    # A catalog the registry crawls could not be fetched or read (kept in its status).
    "catalog_unavailable": ErrorSpec(502, -32603, "unavailable", grpc="UNAVAILABLE"),
    "too_many_streams": ErrorSpec(429, -31429, "unavailable", grpc="RESOURCE_EXHAUSTED"),
    "internal_error": ErrorSpec(500, -32603, "unavailable", "INTERNAL_ERROR", grpc="INTERNAL"),
    "peer_unreachable": ErrorSpec(502, -32603, "delegation", grpc="UNAVAILABLE"),
    "peer_timeout": ErrorSpec(504, -32603, "delegation", grpc="DEADLINE_EXCEEDED"),
    "peer_error": ErrorSpec(502, -32603, "delegation", grpc="UNAVAILABLE"),
    "peer_tls_error": ErrorSpec(502, -32603, "delegation", grpc="UNAVAILABLE"),
    "peer_refused": ErrorSpec(502, -32603, "delegation", grpc="UNAVAILABLE"),
    "peer_address_refused": ErrorSpec(502, -32603, "delegation", grpc="UNAVAILABLE"),
    "no_capable_peer": ErrorSpec(502, -32603, "delegation", grpc="UNAVAILABLE"),
    "invalid_agent_response": ErrorSpec(502, -32006, "delegation", "INVALID_AGENT_RESPONSE",
                                        grpc="INTERNAL"),
    "registry_error": ErrorSpec(502, -32603, "delegation", grpc="UNAVAILABLE"),
    "peer_identity_changed": ErrorSpec(502, -32603, "delegation", grpc="UNAVAILABLE"),
    "peer_log_forked": ErrorSpec(502, -32603, "delegation", grpc="UNAVAILABLE"),
    # A delegation re-attached after a restart: its peer no longer knows its task.
    "peer_task_lost": ErrorSpec(502, -32603, "delegation", grpc="UNAVAILABLE"),
    # Not wire answers: should one leak, it is an internal error to the caller.
    "skill_error": ErrorSpec(500, -32603, "task", grpc="INTERNAL"),
    "invalid_config": ErrorSpec(500, -32603, "setup", grpc="INTERNAL"),
    "invalid_plugin": ErrorSpec(500, -32603, "setup", grpc="INTERNAL"),
    "data_folder_in_use": ErrorSpec(500, -32603, "setup", grpc="INTERNAL"),
    "audit_log_damaged": ErrorSpec(500, -32603, "setup", grpc="INTERNAL"),
    "bad_identity_key": ErrorSpec(500, -32603, "setup", grpc="INTERNAL"),
}

_BY_HTTP_STATUS = {status: code for code, spec in ERROR_TABLE.items()
                   for status in spec.for_http}


def code_for_http_status(status: int) -> str | None:
    """The code that answers a bare HTTP status aiohttp raised, if one is listed."""
    return _BY_HTTP_STATUS.get(status)


class ButlerError(Exception):
    """Base of every error Butler raises; on the wire, ``{"error": {"code", "message"}}``."""

    category: ClassVar[str] = "any"
    # Set on classes whose codes are not listed (a skill's own, a registry's answers):
    # any code is accepted, and this row stands for them on the wire.
    fallback_code: ClassVar[str | None] = None

    def __init__(
        self,
        code: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        if self.fallback_code is None:
            spec = ERROR_TABLE.get(code)
            if spec is None:
                raise ValueError(f"unknown error code {code!r}")
            if self.category != "any" and spec.category != self.category:
                raise ValueError(f"{code!r} is a {spec.category} error, not {self.category}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}
        self.retry_after = retry_after

    @property
    def spec(self) -> ErrorSpec:
        return ERROR_TABLE[self.fallback_code or self.code]

    @property
    def status(self) -> int:
        return self.spec.status

    @property
    def rpc_code(self) -> int:
        return self.spec.rpc_code

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return {"error": body}


class RequestError(ButlerError):
    category = "request"


class OutboundRefused(RequestError):
    """The outbound guard will not let Butler call a URL (``internal.http.OutboundGuard``).

    The message names the host and the reason, never the whole URL: a webhook's query
    string or a peer's path may carry a secret.
    """

    def __init__(self, host: str, reason: str) -> None:
        super().__init__("outbound_refused",
                         f"outbound call to {host or '(no host)'} refused: {reason}")
        self.host = host
        self.reason = reason


class AuthError(ButlerError):
    category = "auth"


class Refusal(ButlerError):
    """Swarm admission said no. Clients must not retry a refusal."""

    category = "refusal"


class StateConflict(ButlerError):
    category = "state"


class Unavailable(ButlerError):
    category = "unavailable"


class DelegationFailed(ButlerError):
    category = "delegation"


class TaskFailed(ButlerError):
    """The work failed; the task ends with this code, which the skill chose."""

    category = "task"
    fallback_code = "skill_error"


class SetupError(ButlerError):
    """This instance cannot run as set up; the message names what to fix."""

    category = "setup"


# The categories a peer may answer with; anything else from a peer is its own failure.
_CATEGORY_CLASSES: dict[str, type[ButlerError]] = {
    "request": RequestError,
    "auth": AuthError,
    "refusal": Refusal,
    "state": StateConflict,
    "unavailable": Unavailable,
    "delegation": DelegationFailed,
}


def error_from_code(code: str, message: str, **kwargs: Any) -> ButlerError:
    """Rebuild the right exception class from a code received over the wire."""
    spec = ERROR_TABLE.get(code)
    if spec is None or spec.category not in _CATEGORY_CLASSES:
        return DelegationFailed("peer_error", f"peer answered {code}: {message}")
    return _CATEGORY_CLASSES[spec.category](code, message, **kwargs)
