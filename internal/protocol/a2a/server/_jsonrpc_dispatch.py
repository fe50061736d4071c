"""JSON-RPC 2.0 itself, whatever carries it: a request's bytes to its answer.

The request object, ids, errors and the choice of the A2A dialect live here once; the
carriers (HTTP with SSE in ``_jsonrpc.py``, a line loop on stdio in ``butler/edges``)
only move bytes. A ``Dialect`` per A2A version decodes the params, calls
``A2AOperations`` and encodes the result.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.model import (
    PROTOCOL_VERSION,
    VERSION_HEADER,
    ButlerError,
    Identity,
    RequestError,
    Unavailable,
    requested_version,
    version_matches,
)

log = logging.getLogger("butler.a2a")

Result = Any  # the JSON ``result``, or an async iterator of results for a stream


class Dialect(Protocol):
    version: str
    methods: frozenset[str]
    streaming: frozenset[str]

    async def call(self, method: str, caller: Identity, params: dict[str, Any],
                   headers: Mapping[str, str]) -> Result: ...

    def error(self, err: ButlerError) -> dict[str, Any]:
        """The JSON-RPC error object for ``err`` in this version's shape."""


@dataclass
class Answer:
    """One answer, or a stream: ``body`` is then its first event and ``rest`` the others
    (each a whole JSON-RPC response with the request's id; a failure is the last one)."""

    dialect: Dialect
    body: dict[str, Any]
    rest: AsyncIterator[dict[str, Any]] | None = None


def _invalid(message: str) -> RequestError:
    return RequestError("invalid_request", message)


class JsonRpcDispatcher:
    def __init__(self, dialects: list[Dialect], *, max_json_depth: int) -> None:
        self.dialects = dialects
        self.max_json_depth = max_json_depth
        self._default = next(d for d in dialects if d.version == PROTOCOL_VERSION)

    def by_version(self, headers: Mapping[str, str] | None) -> Dialect:
        """The dialect a request asks for before its method is known (its errors' shape)."""
        return self._matching(headers) or self._default

    def _matching(self, headers: Mapping[str, str] | None) -> Dialect | None:
        wanted = PROTOCOL_VERSION if headers is None else requested_version(headers)
        for dialect in self.dialects:
            if version_matches(wanted, dialect.version):
                return dialect
        return None

    def failure(self, err: ButlerError, headers: Mapping[str, str] | None,
                request_id: str | int | None = None) -> Answer:
        """The answer to a request that could not be read (too large, too slow)."""
        dialect = self.by_version(headers)
        return Answer(dialect, _error(request_id, dialect, err))

    def _dialect(self, method: str) -> Dialect:
        dialect = next((d for d in self.dialects if method in d.methods), None)
        if dialect is None:
            raise RequestError("method_not_found", f"method {method!r} not found")
        return dialect

    @staticmethod
    def _check_version(method: str, dialect: Dialect, headers: Mapping[str, str]) -> None:
        asked = requested_version(headers)
        if not version_matches(asked, dialect.version):
            raise RequestError(
                "version_not_supported",
                f"{method} is an A2A {dialect.version} method but the request asks for "
                f"A2A-Version {asked!r}" + ("" if headers.get(VERSION_HEADER) else
                                            " (no A2A-Version header means 0.3)"))

    async def answer(self, raw: bytes, caller: Identity,
                     headers: Mapping[str, str] | None) -> Answer:
        """``headers``: the transport's, whose ``A2A-Version`` must match the method's
        version; ``None`` for a carrier without headers (stdio), where the method's name
        alone says its version."""
        request_id: str | int | None = None
        matched = self._matching(headers)
        dialect = matched or self._default
        try:
            if not raw.strip():
                raise RequestError("malformed_json", "request is empty; expected JSON-RPC")
            body = exact_json.loads(raw, max_depth=self.max_json_depth)
            if isinstance(body, list):
                raise _invalid("batch requests are not supported")
            if not isinstance(body, dict):
                raise _invalid("a JSON-RPC request must be an object")
            raw_id = body.get("id")
            if isinstance(raw_id, str | int) and not isinstance(raw_id, bool):
                request_id = raw_id
            if body.get("jsonrpc") != "2.0":
                raise _invalid('"jsonrpc" must be exactly "2.0"')
            if "id" not in body:
                raise _invalid("id is required: A2A does not use JSON-RPC notifications")
            if raw_id is not None and request_id is None:
                raise _invalid("id must be a string, an integer or null")
            method = body.get("method")
            if not isinstance(method, str) or not method:
                raise _invalid("method must be a non-empty string")
            # From here on, errors take the shape of the method's version (as the SDK does:
            # a 0.3 method's version error is -32603, which 0.3 clients know).
            # The negotiated dialect's own methods need no second look at the version.
            if headers is None or matched is None or method not in matched.methods:
                dialect = self._dialect(method)
                if headers is not None:
                    self._check_version(method, dialect, headers)
            params = body.get("params", {})
            if not isinstance(params, dict):
                raise RequestError("invalid_params", "params must be an object (by name)")
            result = await dialect.call(method, caller, params, headers or {})
            if method in dialect.streaming:
                first = await anext(result)  # errors before the first event are plain answers
                return Answer(dialect, _result(request_id, first),
                              _rest(method, request_id, dialect, result))
        except ButlerError as err:
            return Answer(dialect, _error(request_id, dialect, err))
        except Exception:  # a bug: every carrier still answers this id, with no traceback
            log.exception("JSON-RPC request failed")
            return Answer(dialect, _error(request_id, dialect, _INTERNAL))
        return Answer(dialect, _result(request_id, result))


_INTERNAL = Unavailable("internal_error", "internal error")


def _result(request_id: str | int | None, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _error(request_id: str | int | None, dialect: Dialect, err: ButlerError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": dialect.error(err)}


async def _rest(method: str, request_id: str | int | None, dialect: Dialect,
                results: AsyncIterator[Any]) -> AsyncIterator[dict[str, Any]]:
    try:
        async for result in results:
            yield _result(request_id, result)
    except ButlerError as err:
        yield _error(request_id, dialect, err)
    except Exception:
        log.exception("stream of %s failed", method)
        yield _error(request_id, dialect, _INTERNAL)
    finally:
        await results.aclose()  # type: ignore[attr-defined]
