"""The rules of an exchange with a peer's /v2 binding, with no I/O in them: the URL the
guard judges, the headers (the bearer token goes only to the base URL the client was made
for), the body, the time the whole exchange may take, the answer size cap, redirects
answered and never followed, answers decoded and errors mapped into the one error tree.

Two transports drive these rules and only move bytes: ``V2Transport`` over aiohttp (the
daemon, streaming and concurrent work) and ``BlockingV2Transport`` over ``http.client``
(the CLI's commands, which then load neither aiohttp nor asyncio). Both cap an answer
and read events with ``internal.http``'s one size cap and one SSE reader.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from internal.http import AnswerTooLarge
from internal.protocol.a2a.codec import butler_v2, exact_json
from internal.protocol.a2a.model import (
    ButlerError,
    DelegationFailed,
    OutboundRefused,
    Task,
    error_from_code,
)

if TYPE_CHECKING:
    from internal.http import OutboundGuard, SseEvent

MAX_RESPONSE_BYTES = 4 * 1024 * 1024

# A transport's own failures, as the error its caller can act on (None: not a transport
# failure, let it through).
Translate = Callable[[str, Exception], DelegationFailed | None]


@dataclass(frozen=True)
class Prepared:
    method: str
    url: str
    data: bytes | None
    headers: dict[str, str]


class PeerExchange:
    def __init__(self, base_url: str, token: str, *, timeout: float, max_response_bytes: int,
                 name: str, guard: OutboundGuard | None) -> None:
        self.base_url = base_url.rstrip("/")
        self.name = name or without_credentials(self.base_url)
        self.timeout = timeout
        self.max = max_response_bytes
        self._guard = guard
        self._base_checked = False  # the guard has seen this base URL (see ``url``)
        self._base_headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = self._base_headers.copy()
        if extra:
            headers.update(extra)
        return headers

    def url(self, path: str) -> str:
        """Paths are the client's own (ids quoted), so they cannot change the scheme, host
        or credentials: the base URL is judged here once, before a transport first sees it.
        The transport still has the guard judge every request and every connection."""
        url = self.base_url + path
        if self._guard is not None and not self._base_checked:
            self._guard.check_target(url)
            self._base_checked = True
        return url

    def total(self, timeout: float | None) -> float:
        """Seconds the whole exchange may take: the call's own limit within the client's."""
        total = min(timeout, self.timeout) if timeout is not None else self.timeout
        return max(total, 0.001)

    def prepare(self, method: str, path: str, *, body: Any = None,
                headers: Mapping[str, str] | None = None) -> Prepared:
        """The request as it goes out (``OutboundRefused`` if the guard refuses its URL)."""
        data = exact_json.dumps_bytes(body) if body is not None else None
        hdrs = self.headers(headers)
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        return Prepared(method, self.url(path), data, hdrs)

    def decode(self, status: int, raw: bytes) -> Any:
        if 300 <= status < 400:
            raise DelegationFailed("peer_error", f"{self.name} redirected (not followed)")
        try:
            data = exact_json.loads(raw, max_depth=128)
        except ButlerError:
            raise DelegationFailed(
                "peer_error", f"{self.name} answered HTTP {status} with invalid JSON") from None
        if status >= 400:
            err = data.get("error") if isinstance(data, dict) else None
            if isinstance(err, dict) and isinstance(err.get("code"), str):
                details = err.get("details") if isinstance(err.get("details"), dict) else None
                raise error_from_code(err["code"], f"{self.name}: {err.get('message', '')}",
                                      details=details)
            raise DelegationFailed("peer_error", f"{self.name} answered HTTP {status}")
        return data

    def task(self, data: Any) -> Task:
        try:
            return butler_v2.decode_task(data)
        except ButlerError as err:
            raise DelegationFailed("peer_error",
                                   f"{self.name} sent an invalid task: {err.message}") from None

    def event(self, event: SseEvent) -> tuple[str, Any]:
        """An event of a task's stream: (event name, decoded data)."""
        try:
            return event.event, exact_json.loads(event.data, max_depth=128)
        except ButlerError:
            raise DelegationFailed("peer_error",
                                   f"{self.name} sent an event that is not JSON") from None


@contextlib.contextmanager
def mapped_errors(name: str, timeout: float, translate: Translate) -> Iterator[None]:
    """Every failure talking to a peer, as one ``DelegationFailed`` code: the guard's
    refusal, an answer over the size cap, the time running out, then what ``translate``
    makes of the transport's own exceptions; any other ``OSError`` or undecodable text is
    a peer error."""
    try:
        yield
    except OutboundRefused as exc:
        raise DelegationFailed("peer_address_refused", f"{name}: {exc.message}") from None
    except AnswerTooLarge as exc:
        raise DelegationFailed("peer_error", f"{name}: {exc.message}") from None
    except ButlerError:
        raise
    except TimeoutError as exc:
        # The transport may know more (a connection never accepted is not a slow answer).
        raise translate(name, exc) or DelegationFailed(
            "peer_timeout", f"{name} did not answer within {timeout:g}s") from None
    except Exception as exc:
        mapped = translate(name, exc)
        if mapped is not None:
            raise mapped from None
        if isinstance(exc, OSError | UnicodeDecodeError):
            raise DelegationFailed("peer_error", f"{name}: {describe(exc)}") from None
        raise


def without_credentials(url: str) -> str:
    """A URL as an error may show it: a password in it (which the guard refuses to send
    anyway) must not reach a message or a log."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    return scheme + sep + authority.rpartition("@")[2] + slash + path


def describe(exc: BaseException) -> str:
    """Only the kind of failure: a transport's text may quote the peer's raw bytes."""
    status = getattr(exc, "status", None)
    kind = type(exc).__name__
    return f"{kind} (HTTP {status})" if isinstance(status, int) else kind


def quoted(task_id: str) -> str:
    """A peer chooses its task ids: never let one change the path it is put in."""
    return quote(task_id, safe="")
