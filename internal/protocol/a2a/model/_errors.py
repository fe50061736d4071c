"""The one error tree of the wire, organised by what the caller can do about it.

    ButlerError
     ├── RequestError      the request is wrong: fix it, never retry        (4xx)
     │    └── OutboundRefused  the outbound guard will not call this URL
     ├── AuthError         who you are, or what you may do                  (401, 403)
     ├── Refusal           swarm safety said no: never retry                (402, 409, 422)
     ├── StateConflict     the task is not in a state that allows this      (409)
     ├── Unavailable       try again later                                  (429, 503)
     └── DelegationFailed  a peer could not do the work (a task outcome, not an HTTP answer)

Every machine-readable code appears once in ``ERROR_TABLE`` with its HTTP status
and JSON-RPC code; handlers never pick statuses themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

A2A_DOMAIN = "a2a-protocol.org"
BUTLER_DOMAIN = "butler"


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    status: int
    rpc_code: int
    category: str
    reason: str = ""  # the A2A ErrorInfo reason, for errors the A2A specification defines

    def error_info(self, code: str) -> tuple[str, str]:
        """(reason, domain) of the ``google.rpc.ErrorInfo`` the A2A bindings send."""
        return (self.reason, A2A_DOMAIN) if self.reason else (code.upper(), BUTLER_DOMAIN)


# code -> (HTTP status, JSON-RPC code, category, A2A reason). JSON-RPC codes -32700..-32600
# are JSON-RPC 2.0's, -32001..-32009 the A2A specification's; Butler's own errors use
# -31xxx, where xxx is the HTTP status (docs/errors.md).
ERROR_TABLE: dict[str, ErrorSpec] = {
    "malformed_json": ErrorSpec(400, -32700, "request", "INVALID_REQUEST"),
    "invalid_request": ErrorSpec(400, -32600, "request", "INVALID_REQUEST"),
    "invalid_params": ErrorSpec(400, -32602, "request", "INVALID_PARAMS"),
    "invalid_envelope": ErrorSpec(400, -32602, "request"),
    "not_found": ErrorSpec(404, -32601, "request", "METHOD_NOT_FOUND"),
    "method_not_found": ErrorSpec(404, -32601, "request", "METHOD_NOT_FOUND"),
    "task_not_found": ErrorSpec(404, -32001, "request", "TASK_NOT_FOUND"),
    "method_not_allowed": ErrorSpec(405, -32601, "request"),
    "payload_too_large": ErrorSpec(413, -32600, "request"),
    "unsupported_media_type": ErrorSpec(415, -32005, "request", "CONTENT_TYPE_NOT_SUPPORTED"),
    "header_too_large": ErrorSpec(400, -32600, "request"),
    "push_notification_not_supported": ErrorSpec(400, -32003, "request",
                                                 "PUSH_NOTIFICATION_NOT_SUPPORTED"),
    "unsupported_operation": ErrorSpec(400, -32004, "request", "UNSUPPORTED_OPERATION"),
    "extended_card_not_configured": ErrorSpec(400, -32007, "request",
                                              "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
    "extension_support_required": ErrorSpec(400, -32008, "request",
                                            "EXTENSION_SUPPORT_REQUIRED"),
    "version_not_supported": ErrorSpec(400, -32009, "request", "VERSION_NOT_SUPPORTED"),
    "unauthenticated": ErrorSpec(401, -31401, "auth"),
    "forbidden": ErrorSpec(403, -31403, "auth"),
    "chain_mismatch": ErrorSpec(403, -31403, "auth"),
    "name_owned": ErrorSpec(403, -31403, "auth"),
    "name_quota_exceeded": ErrorSpec(403, -31403, "auth"),
    "loop_detected": ErrorSpec(409, -31409, "refusal"),
    "depth_exceeded": ErrorSpec(422, -31422, "refusal"),
    "budget_exhausted": ErrorSpec(402, -31402, "refusal"),
    "task_terminal": ErrorSpec(409, -32004, "state"),
    "task_not_cancelable": ErrorSpec(409, -32002, "state", "TASK_NOT_CANCELABLE"),
    "task_not_waiting": ErrorSpec(409, -32004, "state"),
    "idempotency_conflict": ErrorSpec(409, -32600, "state"),
    "rate_limited": ErrorSpec(429, -31429, "unavailable"),
    "overloaded": ErrorSpec(503, -31503, "unavailable"),
    "request_timeout": ErrorSpec(408, -32600, "request"),
    "outbound_refused": ErrorSpec(400, -32602, "request"),
    "internal_error": ErrorSpec(500, -32603, "unavailable", "INTERNAL_ERROR"),
    "peer_unreachable": ErrorSpec(502, -32603, "delegation"),
    "peer_timeout": ErrorSpec(504, -32603, "delegation"),
    "peer_error": ErrorSpec(502, -32603, "delegation"),
    "peer_tls_error": ErrorSpec(502, -32603, "delegation"),
    "peer_refused": ErrorSpec(502, -32603, "delegation"),
    "peer_address_refused": ErrorSpec(502, -32603, "delegation"),
    "no_capable_peer": ErrorSpec(502, -32603, "delegation"),
    "invalid_agent_response": ErrorSpec(502, -32006, "delegation", "INVALID_AGENT_RESPONSE"),
}


class ButlerError(Exception):
    """Base of every error that reaches a caller as ``{"error": {"code", "message"}}``."""

    category = "any"

    def __init__(
        self,
        code: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
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
    def status(self) -> int:
        return ERROR_TABLE[self.code].status

    @property
    def rpc_code(self) -> int:
        return ERROR_TABLE[self.code].rpc_code

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
    if spec is None:
        return DelegationFailed("peer_error", f"peer answered {code}: {message}")
    return _CATEGORY_CLASSES[spec.category](code, message, **kwargs)
