"""aiohttp plumbing every route shares: JSON bodies, errors as JSON, bearer auth."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong

from internal.http._incidents import SLOW_BODY, report
from internal.http._load_limits import refusal_hold, retry_hold
from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.model import (
    ButlerError,
    Identity,
    RequestError,
    Unavailable,
    code_for_http_status,
)

log = logging.getLogger("butler.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

IDENTITY = web.RequestKey("butler.identity", Identity)

# A binding whose errors have their own shape (A2A JSON-RPC, A2A HTTP+JSON) registers a
# renderer; it answers for the requests it owns and returns None for the rest.
ErrorRenderer = Callable[[web.Request, ButlerError], "web.Response | None"]
ERROR_RENDERERS = web.AppKey("butler.error_renderers", list[ErrorRenderer])
# The most a refusal to come back later is held before it is answered (``refusal_hold``);
# without it, not at all.
REFUSAL_HOLD = web.AppKey("butler.refusal_hold", float)

def json_response(
    data: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return json_bytes_response(exact_json.dumps_bytes(data), status=status, headers=headers)


def json_bytes_response(
    body: bytes, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """An answer whose JSON is already encoded."""
    return web.Response(body=body, status=status, content_type="application/json",
                        headers=headers)


def error_response(err: ButlerError) -> web.Response:
    return json_response(err.to_json(), status=err.status, headers=error_headers(err))


def error_headers(err: ButlerError) -> dict[str, str]:
    headers: dict[str, str] = {}
    if err.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="butler"'
    if err.retry_after is not None:
        headers["Retry-After"] = str(err.retry_after)
    return headers


def render_error(request: web.Request, err: ButlerError) -> web.Response:
    for render in request.app.get(ERROR_RENDERERS, ()):
        response = render(request, err)
        if response is not None:
            return response
    return error_response(err)


def protocol_error(status: int, exc: BaseException | None) -> ButlerError:
    """What aiohttp rejected before any handler ran (malformed HTTP, oversized headers).

    Built from the status alone: aiohttp's own message quotes the raw bytes, which can
    hold a bearer token.
    """
    if status >= 500:
        return Unavailable("internal_error", "internal error")
    if isinstance(exc, LineTooLong) or status == 431:
        return RequestError("header_too_large", "request line or header too large")
    return RequestError(code_for_http_status(status) or "invalid_request",
                        "malformed HTTP request")


def identity_of(request: web.Request) -> Identity:
    try:
        ident: Identity = request[IDENTITY]
    except KeyError:
        raise RuntimeError("route reached without authentication") from None
    return ident


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ButlerError as err:
        answer = render_error(request, err)
        hold = refusal_hold(err, request.app.get(REFUSAL_HOLD, 0.0))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = code_for_http_status(exc.status) or (
            "invalid_request" if exc.status < 500 else "overloaded")
        message = "request body too large" if exc.status == 413 else exc.reason
        mapped = RequestError(code, message) if exc.status < 500 else Unavailable(code, message)
        return render_error(request, mapped)
    except asyncio.CancelledError:
        raise
    except Exception:
        # The client learns only that it failed; the operator gets the traceback.
        log.exception("unhandled error on %s %s", request.method, request.path)
        return render_error(request, Unavailable("internal_error", "internal error"))
    # Held after the except block: the exception, and the frames its traceback holds, are
    # freed meanwhile rather than kept for the hold.
    if hold:
        await _held(request, hold)
    return answer


async def hold_refusal(request: web.Request, retry_after: float | None) -> None:
    """For an answer built from a refusal that asked to come back after ``retry_after``
    seconds (a JSON-RPC error answered 200): held as ``error_middleware`` holds one."""
    hold = retry_hold(retry_after, request.app.get(REFUSAL_HOLD, 0.0))
    if hold:
        await _held(request, hold)


async def _held(request: web.Request, seconds: float) -> None:
    """``seconds``, or until the client hangs up: a refusal held past its connection would
    let a client that sends and closes at once keep any number of them waiting, beyond
    its address's share of the connections. The listener's connections say when they are
    gone (``lost``)."""
    lost = getattr(request.protocol, "lost", None)
    if isinstance(lost, asyncio.Future):
        if not lost.done():
            await asyncio.wait((lost,), timeout=seconds)
    elif request.transport is not None:
        await asyncio.sleep(seconds)


_JSON_TYPES = ("application/json", "application/octet-stream", "")


async def read_body(request: web.Request, *, body_seconds: float) -> bytes:
    """The raw request body; a slow body is cut off after ``body_seconds``."""
    try:
        if request.content.is_eof():
            return await request.read()  # all there already: no deadline to arm
        async with asyncio.timeout(body_seconds):
            return await request.read()
    except TimeoutError:
        report(request.app, SLOW_BODY, f"answered 408 to {request.remote}: request body not "
               f"received within {body_seconds:g}s (server.body_timeout_seconds)")
        raise RequestError(
            "request_timeout", f"request body not received within {body_seconds:g}s"
        ) from None


async def read_json(request: web.Request, *, max_depth: int, body_seconds: float) -> Any:
    """The request body as JSON; a slow body is cut off after ``body_seconds``."""
    ctype = request.content_type
    if request.body_exists and ctype not in _JSON_TYPES and not ctype.endswith("+json"):
        raise RequestError("unsupported_media_type", f"expected application/json, got {ctype}")
    raw = await read_body(request, body_seconds=body_seconds)
    if not raw.strip():
        raise RequestError("malformed_json", "request body is empty; expected JSON")
    return exact_json.loads(raw, max_depth=max_depth)
