"""The one error tree of the wire, organised by what the caller can do about it.

    ButlerError
     ├── RequestError      the request is wrong: fix it, never retry        (4xx)
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


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    status: int
    rpc_code: int
    category: str


# code -> (HTTP status, JSON-RPC code, category)
ERROR_TABLE: dict[str, ErrorSpec] = {
    "malformed_json": ErrorSpec(400, -32700, "request"),
    "invalid_request": ErrorSpec(400, -32600, "request"),
    "invalid_params": ErrorSpec(400, -32602, "request"),
    "invalid_envelope": ErrorSpec(400, -32602, "request"),
    "not_found": ErrorSpec(404, -32001, "request"),
    "task_not_found": ErrorSpec(404, -32001, "request"),
    "method_not_allowed": ErrorSpec(405, -32601, "request"),
    "payload_too_large": ErrorSpec(413, -32600, "request"),
    "unsupported_media_type": ErrorSpec(415, -32005, "request"),
    "header_too_large": ErrorSpec(400, -32600, "request"),
    "unauthenticated": ErrorSpec(401, -32007, "auth"),
    "forbidden": ErrorSpec(403, -32007, "auth"),
    "chain_mismatch": ErrorSpec(403, -32007, "auth"),
    "name_owned": ErrorSpec(403, -32007, "auth"),
    "name_quota_exceeded": ErrorSpec(403, -32007, "auth"),
    "loop_detected": ErrorSpec(409, -32009, "refusal"),
    "depth_exceeded": ErrorSpec(422, -32009, "refusal"),
    "budget_exhausted": ErrorSpec(402, -32009, "refusal"),
    "task_terminal": ErrorSpec(409, -32002, "state"),
    "task_not_cancelable": ErrorSpec(409, -32002, "state"),
    "task_not_waiting": ErrorSpec(409, -32002, "state"),
    "idempotency_conflict": ErrorSpec(409, -32600, "state"),
    "rate_limited": ErrorSpec(429, -32603, "unavailable"),
    "overloaded": ErrorSpec(503, -32603, "unavailable"),
    "request_timeout": ErrorSpec(408, -32600, "request"),
    "internal_error": ErrorSpec(500, -32603, "unavailable"),
    "peer_unreachable": ErrorSpec(502, -32603, "delegation"),
    "peer_timeout": ErrorSpec(504, -32603, "delegation"),
    "peer_error": ErrorSpec(502, -32603, "delegation"),
    "peer_refused": ErrorSpec(502, -32603, "delegation"),
    "no_capable_peer": ErrorSpec(502, -32603, "delegation"),
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
