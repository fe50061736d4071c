"""A lean HTTP/1.1 client for one Butler calling another (``a2a.delegate``).

aiohttp's client cost about 0.3 ms of CPU per call here, and a delegation chain pays for
a call at every hop (docs/performance.md). This client does what those calls need and
nothing more: one request at a time on each connection, kept alive for the next; bodies
framed by Content-Length, chunked transfer coding or the end of the connection; a cap on
the head and on the body; TLS through asyncio. It never follows a redirect: the caller
gets the 3xx. Streams (server-sent events) and every other client stay on aiohttp.

A connection that fails, times out or is cancelled mid-request is closed, never reused:
what it would carry next is unknown.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024
MAX_CHUNK_LINE = 1024
# Below the shortest keep-alive timeout common servers use (uvicorn's 5 s): a connection
# the server may already have closed is not used for a request it might not see.
IDLE_SECONDS = 4.0
MAX_IDLE_PER_PEER = 32
_NO_BODY = (204, 304)


class HttpError(Exception):
    """The peer broke HTTP/1.1 or closed the connection before its answer was whole."""


class PeerClosed(HttpError):
    pass


class MalformedAnswer(HttpError):
    pass


class BodyTooLarge(HttpError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"answer exceeds {limit} bytes")
        self.limit = limit


class ConnectFailed(Exception):
    """No connection could be made; ``__cause__`` is the OSError (or TLS error) why."""


@dataclass(slots=True)
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header's values joined by ", "
    body: bytes


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._buf = bytearray()
        self._answer: asyncio.Future[Answer] | None = None
        self._limit = 0
        self._status = 0
        self._headers: dict[str, str] = {}
        self._keep_alive = False
        self._body = bytearray()
        self._framing = ""  # "" (reading the head), "length", "chunked" or "close"
        self._head_only = False
        self._left = 0  # "length": bytes still to come; "chunked": of the current chunk

    # -- asyncio.Protocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._answer is None or self._answer.done():
            self.close()  # bytes nobody asked for: nothing after them can be trusted
            return
        self._buf += data
        try:
            self._parse()
        except HttpError as err:
            self._fail(err)
        except Exception:  # a parser slip must not escape into the event loop
            self._fail(MalformedAnswer("the answer could not be parsed"))

    def eof_received(self) -> bool:
        if self._framing == "close" and self._answer is not None and not self._answer.done():
            self._keep_alive = False
            self._done()  # a clean end of the connection is the end of this body
        self._peer_gone()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._peer_gone()  # a reset, or our own close: never a whole answer

    # -- requests --------------------------------------------------------------------

    def send(self, data: bytes, limit: int, *, head: bool = False) -> asyncio.Future[Answer]:
        """``head``: the answer to a HEAD request, which has no body whatever it says."""
        assert self.transport is not None
        self._answer = asyncio.get_running_loop().create_future()
        self._limit = limit
        self._head_only = head
        self._status, self._headers, self._framing = 0, {}, ""
        self._body = bytearray()
        self.transport.write(data)
        return self._answer

    @property
    def reusable(self) -> bool:
        return self._keep_alive and not self.closed and not self._buf

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, err: HttpError) -> None:
        self._keep_alive = False
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(err)
        self.close()

    def _peer_gone(self) -> None:
        if self._answer is not None and not self._answer.done():
            self._fail(PeerClosed("the peer closed the connection before its answer ended"))

    # -- parsing -----------------------------------------------------------------------

    def _parse(self) -> None:
        if not self._framing and not self._read_head():
            return
        if self._framing == "length":
            take = min(self._left, len(self._buf))
            self._body += self._buf[:take]
            del self._buf[:take]
            self._left -= take
            if not self._left:
                self._done()
        elif self._framing == "chunked":
            self._read_chunks()
        else:  # "close"
            self._grow(len(self._buf))
            self._body += self._buf
            self._buf.clear()

    def _read_head(self) -> bool:
        """Parse the status line and headers once they are all here; False until then."""
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD:
                    raise MalformedAnswer(f"the answer's head exceeds {MAX_HEAD} bytes")
                return False
            if end > MAX_HEAD:
                raise MalformedAnswer(f"the answer's head exceeds {MAX_HEAD} bytes")
            lines = self._buf[:end].decode("latin-1").split("\r\n")
            del self._buf[:end + 4]
            version, status = _status_line(lines[0])
            if 100 <= status < 200:
                if status == 101:
                    raise MalformedAnswer("the peer switched protocols")
                continue  # "100 Continue" and the like: the answer follows
            break
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise MalformedAnswer("malformed header line")
            key, value = name.lower(), value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        self._status, self._headers = status, headers
        tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        self._keep_alive = "close" not in tokens if version == "HTTP/1.1" \
            else "keep-alive" in tokens
        coding = headers.get("transfer-encoding")
        if status in _NO_BODY or self._head_only:
            self._framing, self._left = "length", 0
        elif coding is not None:
            if coding.lower() != "chunked":
                raise MalformedAnswer(f"unsupported transfer coding {coding!r}")
            self._framing, self._left = "chunked", -1
        elif "content-length" in headers:
            self._framing, self._left = "length", _content_length(headers["content-length"])
            self._grow(self._left)
        else:
            self._framing, self._keep_alive = "close", False
        if not self._left and self._framing == "length":
            self._done()
            return False
        return True

    def _read_chunks(self) -> None:
        while True:
            if self._left > 0:  # inside a chunk's data
                take = min(self._left, len(self._buf))
                self._body += self._buf[:take]
                del self._buf[:take]
                self._left -= take
                if self._left:
                    return
                self._left = -2  # its closing CRLF comes next
            if self._left == -2:
                if len(self._buf) < 2:
                    return
                if self._buf[:2] != b"\r\n":
                    raise MalformedAnswer("a chunk does not end with CRLF")
                del self._buf[:2]
                self._left = -1
            if self._left == -3:  # trailers, after the last chunk: up to an empty line
                end = self._buf.find(b"\r\n")
                if end < 0:
                    if len(self._buf) > MAX_HEAD:
                        raise MalformedAnswer("the answer's trailers are too long")
                    return
                del self._buf[:end + 2]
                if end == 0:
                    self._done()
                    return
                continue
            end = self._buf.find(b"\r\n")  # a chunk-size line
            if end < 0:
                if len(self._buf) > MAX_CHUNK_LINE:
                    raise MalformedAnswer("a chunk-size line is too long")
                return
            size = _chunk_size(bytes(self._buf[:end]))
            del self._buf[:end + 2]
            if size == 0:
                self._left = -3
                continue
            self._grow(size)
            self._left = size

    def _grow(self, more: int) -> None:
        if len(self._body) + more > self._limit:
            raise BodyTooLarge(self._limit)

    def _done(self) -> None:
        answer = Answer(self._status, self._headers, bytes(self._body))
        self._body = bytearray()
        self._framing = ""
        if self._answer is not None and not self._answer.done():
            self._answer.set_result(answer)


def _status_line(line: str) -> tuple[str, int]:
    version, _, rest = line.partition(" ")
    code = rest[:3]
    if version not in ("HTTP/1.1", "HTTP/1.0") or not _is_digits(code) \
            or (len(rest) > 3 and rest[3] != " "):
        raise MalformedAnswer("malformed status line")
    return version, int(code)


def _content_length(text: str) -> int:
    values = {v.strip() for v in text.split(",")}
    if len(values) != 1 or not _is_digits(value := values.pop()):
        raise MalformedAnswer("malformed Content-Length")
    return int(value)


def _is_digits(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also takes "²", which ``int`` then refuses."""
    return text.isascii() and text.isdigit()


def _chunk_size(line: bytes) -> int:
    text = line.split(b";", 1)[0].strip()
    if not text or len(text) > 16 or not all(c in b"0123456789abcdefABCDEF" for c in text):
        raise MalformedAnswer("malformed chunk size")
    return int(text, 16)


def _safe(text: str) -> str:
    if "\r" in text or "\n" in text:
        raise ValueError("a request line or header must not contain CR or LF")
    return text


class Http1Pool:
    """Keep-alive connections by peer (scheme, host, port, TLS context)."""

    def __init__(self) -> None:
        self._idle: dict[tuple[object, ...], deque[_Connection]] = {}
        self._busy: set[_Connection] = set()
        self._default_tls: ssl.SSLContext | None = None

    @property
    def in_use(self) -> int:
        """Connections carrying a request right now."""
        return len(self._busy)

    @property
    def open(self) -> int:
        """Connections open: in use, or idle and kept for the next request."""
        return len(self._busy) + sum(
            1 for idle in self._idle.values() for c in idle if not c.closed)

    async def request(self, method: str, url: str, headers: dict[str, str],
                      body: bytes | None, *, max_body: int, connect_timeout: float,
                      tls: ssl.SSLContext | bool = True) -> Answer:
        """One exchange; ``tls``: a context for https (True: the system's trust)."""
        parts = urlsplit(_safe(url))  # urlsplit would drop CR and LF silently
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        secure = parts.scheme == "https"
        context = self._context(tls) if secure else None
        port = parts.port or (443 if secure else 80)
        key = (parts.scheme, parts.hostname, port, id(context))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rpartition("@")[2]  # never the URL's user:password
        lines = [f"{_safe(method)} {_safe(target)} HTTP/1.1", f"Host: {_safe(host)}"]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        lines += [f"{_safe(k)}: {_safe(v)}" for k, v in headers.items()]
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        conn = self._reuse(key) or await self._connect(parts.hostname, port, context,
                                                       connect_timeout)
        self._busy.add(conn)
        try:
            answer = await conn.send(data, max_body, head=method == "HEAD")
        except BaseException:
            conn.close()
            raise
        finally:
            self._busy.discard(conn)
        if conn.reusable:
            self._keep(key, conn)
        else:
            conn.close()
        return answer

    def _context(self, tls: ssl.SSLContext | bool) -> ssl.SSLContext:
        if isinstance(tls, ssl.SSLContext):
            return tls
        if self._default_tls is None:
            self._default_tls = ssl.create_default_context()
        return self._default_tls

    def _reuse(self, key: tuple[object, ...]) -> _Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be stale
            if not conn.closed and now - conn.idle_since < IDLE_SECONDS:
                return conn
            conn.close()
        return None

    def _keep(self, key: tuple[object, ...], conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        idle = self._idle.setdefault(key, deque())
        idle.append(conn)
        while len(idle) > MAX_IDLE_PER_PEER:
            idle.popleft().close()

    async def _connect(self, host: str, port: int, context: ssl.SSLContext | None,
                       timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        conn = _Connection()
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(lambda: conn, host, port, ssl=context,
                                             server_hostname=host if context else None)
        except OSError as exc:  # ssl.SSLError is an OSError too
            conn.close()
            raise ConnectFailed(str(exc)) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        for conn in list(self._busy):
            conn.close()
