"""The /v2 client for one-shot commands (the CLI), over the standard library's
``http.client``: no event loop, no aiohttp, so a command starts in a fraction of the time
(docs/performance.md, "CLI start-up").

It is the /v2 binding's transport without aiohttp, not a second client: the rules of each
exchange (URL, token, body, size cap, redirects refused, answers decoded, errors mapped)
are ``PeerExchange``'s, and
the guard's two steps are the guard's own code: ``check_target`` on every request's URL,
then ``check_addresses`` on every address the name resolves to, and the connection goes
only to an address that passed. Each request has its own connection, closed when its
answer is read: a command makes a few requests, so there is no idle connection to find
closed by the peer and retry.
"""

from __future__ import annotations

import functools
import http.client
import io
import socket
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

from yarl import URL

from internal.http import Capped, OutboundGuard, SseParser, ip_literal
from internal.protocol.a2a.client._exchange import (
    MAX_RESPONSE_BYTES,
    PeerExchange,
    Prepared,
    connect_failure,
    describe,
    mapped_errors,
    not_accepted,
    quoted,
)
from internal.protocol.a2a.model import DelegationFailed

# host, port -> the addresses the name has (the system's resolver by default)
Resolve = Callable[[str, int], list[str]]
_READ = 65536


def system_addresses(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class BlockingV2Transport:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        guard: OutboundGuard,
        connect_timeout: float = 3.0,
        timeout: float = 60.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        name: str = "",
        tls: ssl.SSLContext | None = None,
        resolve: Resolve = system_addresses,
    ) -> None:
        """``tls``: a context trusting a pinned CA; None verifies against the system's
        (built on the first https request only). ``resolve``: tests map names with it."""
        self._x = PeerExchange(base_url, token, timeout=timeout,
                               max_response_bytes=max_response_bytes, name=name, guard=guard)
        self.base_url = self._x.base_url
        self.name = self._x.name
        self._guard = guard
        self._connect_timeout = connect_timeout
        self._tls = tls
        self._resolve = resolve

    def __repr__(self) -> str:
        return f"BlockingV2Transport({self.base_url!r})"

    def request(self, method: str, path: str, *, body: Any = None,
                headers: Mapping[str, str] | None = None, timeout: float | None = None) -> Any:
        total = self._x.total(timeout)
        deadline = time.monotonic() + total
        with mapped_errors(self.name, total, _stdlib_failure):
            call = self._x.prepare(method, path, body=body, headers=headers)
            conn, resp = self._exchange(call, deadline)
            try:
                return self._x.decode(resp.status, self._read_capped(conn, resp, deadline))
            finally:
                _close(conn, resp)

    def events(self, task_id: str) -> Iterator[tuple[str, Any]]:
        """Server-sent events of a task: (event name, decoded data) until the stream ends.
        The head (and an error's body) must come within the client's timeout; the events
        then may take as long as they take: a task may be quiet for long."""
        with mapped_errors(self.name, self._x.timeout, _stdlib_failure):
            call = self._x.prepare("GET", f"/v2/tasks/{quoted(task_id)}/events")
            conn, resp = self._exchange(call, time.monotonic() + self._x.timeout)
            try:
                if resp.status != 200:
                    self._x.decode(resp.status, self._read_capped(conn, resp, conn.deadline))
                conn.deadline = None
                stream = SseParser(self._x.max)
                while chunk := resp.read1(_READ):
                    yield from map(self._x.event, stream.feed(chunk))
            finally:
                _close(conn, resp)

    def _exchange(self, call: Prepared, deadline: float | None
                  ) -> tuple[_PinnedConnection, http.client.HTTPResponse]:
        url = self._guard.check_target(call.url)  # step 1, as the session's middleware does
        conn = self._connect(url, deadline)
        conn.deadline = deadline
        try:
            _settle(conn, deadline)
            conn.putrequest(call.method, url.raw_path_qs, skip_accept_encoding=True)
            for key, value in call.headers.items():
                conn.putheader(key, value)
            if call.data is not None or call.method in ("POST", "PUT", "PATCH"):
                conn.putheader("Content-Length", str(len(call.data or b"")))
            conn.endheaders(call.data)
            resp = conn.getresponse()
        except BaseException:
            conn.close()
            raise
        try:
            _check_framing(resp)
        except BaseException:
            _close(conn, resp)
            raise
        return conn, resp

    def _connect(self, url: URL, deadline: float | None) -> _PinnedConnection:
        """Step 2: the name resolved once, every address judged, and only those connected."""
        host, port = url.raw_host or "", url.port or 0
        literal = ip_literal(host)  # judged with the URL (step 1)
        try:
            addresses = [literal] if literal is not None else self._resolve(host, port)
        except OSError as exc:
            raise connect_failure(self.name, exc, 0.0) from None
        self._guard.check_addresses(host, addresses)
        tls = self._context() if url.scheme == "https" else None
        conn = _PinnedConnection(host, port, addresses, tls)
        conn.timeout = min(self._connect_timeout, _left(deadline) or self._connect_timeout)
        started = time.monotonic()
        try:
            conn.connect()
        except TimeoutError:
            raise not_accepted(self.name, time.monotonic() - started) from None
        except OSError as exc:
            raise connect_failure(self.name, exc, time.monotonic() - started) from None
        return conn

    def _context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def _read_capped(self, conn: _PinnedConnection, resp: http.client.HTTPResponse,
                     deadline: float | None) -> bytes:
        count = Capped(self._x.max, resp.length)
        chunks: list[bytes] = []
        while True:
            _settle(conn, deadline)
            chunk = resp.read1(_READ)
            if not chunk:
                return b"".join(chunks)
            chunks.append(count.add(chunk))


class _PinnedConnection(http.client.HTTPConnection):
    """Connects to the addresses the guard passed, in order, not to whatever the name
    resolves to by then; TLS (when given) checks the certificate against the name."""

    def __init__(self, host: str, port: int, addresses: list[str],
                 tls: ssl.SSLContext | None) -> None:
        super().__init__(host, port)
        self.default_port = 443 if tls is not None else 80  # the Host header omits it
        self._addresses = addresses
        self._tls = tls
        # The socket stays ours to time out even after http.client hands it to a response.
        self.pinned: socket.socket | None = None
        self.deadline: float | None = None  # of the exchange; None: reads wait as long
        self.response_class = cast("type[http.client.HTTPResponse]",
                                   functools.partial(_Answer, deadline=lambda: self.deadline))

    def connect(self) -> None:
        failure: OSError = OSError("no address")
        for address in self._addresses:
            try:
                sock = socket.create_connection((address, self.port), self.timeout)
            except OSError as exc:
                failure = exc
                continue
            try:
                self.sock = self.pinned = (
                    self._tls.wrap_socket(sock, server_hostname=self.host)
                    if self._tls is not None else sock)
            except BaseException:
                sock.close()
                raise
            return
        raise failure


class _Answer(http.client.HTTPResponse):
    """An answer whose every read from the socket is bounded by the time left: http.client
    reads a status or header line, or a chunk's size, with as many reads as it takes, so a
    peer sending one byte at a time would otherwise stretch one read past any deadline."""

    def __init__(self, sock: socket.socket, *args: Any,
                 deadline: Callable[[], float | None], **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp.close()
        self.fp = io.BufferedReader(_TimedReader(sock, deadline))


class _TimedReader(io.RawIOBase):
    def __init__(self, sock: socket.socket, deadline: Callable[[], float | None]) -> None:
        # A file of the socket: it keeps the socket open while http.client closes the
        # connection it hands the answer to.
        self._raw = sock.makefile("rb", buffering=0)
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        deadline = self._deadline()
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError
        self._sock.settimeout(_left(deadline))
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


def _close(conn: _PinnedConnection, resp: http.client.HTTPResponse) -> None:
    """The answer too: once http.client has handed it the socket, closing the connection
    alone leaves the socket open."""
    resp.close()
    conn.close()


def _left(deadline: float | None) -> float | None:
    """Seconds to the deadline (at least a millisecond), None without one."""
    return None if deadline is None else max(deadline - time.monotonic(), 0.001)


def _settle(conn: _PinnedConnection, deadline: float | None) -> None:
    """Bound the next socket operation by the time left: the deadline is checked before
    every read and bounds each one."""
    if deadline is not None and time.monotonic() >= deadline:
        raise TimeoutError
    if conn.pinned is not None:
        conn.pinned.settimeout(_left(deadline))


def _check_framing(resp: http.client.HTTPResponse) -> None:
    """What ``http.client`` lets by and aiohttp refuses: a Content-Length that is not one
    number (it would read to the close instead), a header line without a colon."""
    lengths = resp.headers.get_all("Content-Length") or []
    if lengths and (len(lengths) > 1 or (resp.length is None and not resp.chunked)):
        raise http.client.HTTPException("bad Content-Length")
    if resp.headers.defects:
        raise http.client.HTTPException("malformed header")


def _stdlib_failure(name: str, exc: Exception, took: float) -> DelegationFailed | None:
    if isinstance(exc, ssl.SSLError):  # also a ValueError, when a certificate is refused
        return None
    # http.client's chunk reader raises ValueError for a chunk size that is not hex.
    if isinstance(exc, http.client.HTTPException | ValueError):
        return DelegationFailed("peer_error", f"{name}: {describe(exc)}")
    return None  # sockets, TLS and time: ``mapped_errors`` says what happened
