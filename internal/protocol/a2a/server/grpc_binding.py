"""The A2A 1.0 gRPC binding (``lf.a2a.v1.A2AService``), a thin carrier over the JSON-RPC
1.0 methods.

gRPC's methods are JSON-RPC 1.0's, by the same names, and its messages are what the A2A
1.0 JSON wire is the proto3 JSON mapping of. So each call converts its request to proto3
JSON (``codec.a2a_grpc``), runs the very ``V1Dialect`` method the JSON-RPC binding runs
(same operations, same engine, same swarm envelope from metadata and headers), and
converts the answer back. Each call is limited as an HTTP request is, by the same
``LoadLimits`` (the peer address's bucket, then a place in the one in-flight count, which
a stream gives back for a stream slot) and the same per-caller buckets, so HTTP and gRPC
together hold one share of the daemon. Metadata plays the part of HTTP headers:
``authorization`` goes to the one ``TokenVerifier``, ``a2a-version`` is checked as on
HTTP+JSON, and the ``x-swarm-*`` entries and ``traceparent`` carry the envelope. Errors
end the call with the ``ERROR_TABLE`` row's gRPC code and a ``google.rpc.Status`` with
its ``ErrorInfo`` (and ``retry-after`` when the caller should wait).

``serve`` puts it behind a front of Butler's own (internal/http/_tcp_front.py): gRPC
listens on a unix socket only the daemon's user may reach, the public port's connections
are capped as the HTTP port's are, and each call's address is the client's the front
carried (``RelayedPeers``).

Needs the ``grpc`` extra; only the daemon imports this module, and only when
``grpc_port`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import grpc
from a2a.types import a2a_pb2
from google.protobuf import message_factory
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from multidict import CIMultiDict

from internal.http import (
    HTTP2_PREFACE,
    TLS_RECORD,
    IncidentLog,
    ListenSettings,
    LoadLimits,
    PortConnections,
    RelayedPeers,
    StreamSlots,
    TcpFront,
    TokenBuckets,
    TokenVerifier,
    limited,
    refusal_hold,
)
from internal.protocol.a2a.codec import a2a_grpc, swarm_envelope
from internal.protocol.a2a.model import (
    AuthError,
    ButlerError,
    Identity,
    RequestError,
    Unavailable,
)
from internal.protocol.a2a.server._jsonrpc import V1Dialect
from internal.protocol.a2a.server._operations import check_version
from internal.shares import FairPool, Share

log = logging.getLogger("butler.a2a")
Handler = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any]


@dataclass(frozen=True)
class GrpcLimits:
    """What one connection may cost before and while it calls: the HTTP/2 preface and
    settings within ``handshake_seconds``; a connection with no call in flight for
    ``idle_seconds`` (one that never made a first call included) closed; at most
    ``max_streams_per_connection`` calls open on one connection (past it the client's
    HTTP/2 layer waits), so half-open streams cannot pile up memory."""

    max_message_bytes: int = 4 * 1024 * 1024
    handshake_seconds: float = 10.0
    idle_seconds: float = 10.0
    max_streams_per_connection: int = 32


class GrpcBinding:
    def __init__(self, dialect: V1Dialect, verifier: TokenVerifier, load_limits: LoadLimits, *,
                 streams: StreamSlots | None = None,
                 per_caller: TokenBuckets | None = None,
                 relayed: RelayedPeers | None = None,
                 message_seconds: float = 30.0, refusal_hold: float = 0.0,
                 held_refusals: int = 1024) -> None:
        """``load_limits``, ``streams``, ``per_caller``: the HTTP listener's, so a client's
        requests, streams and calls count once whichever binding carries them.
        ``relayed``: the front's sockets when ``serve`` put one before the server (a call
        from any other socket is refused); None: the peer is the caller's own address.
        ``message_seconds``: how long an admitted call's request message may take to come
        (a stream that opened and never sent it would hold its connection and its place,
        as a slow HTTP body would: ``server.body_timeout_seconds``).

        ``refusal_hold``: the most a refusal to come back later waits before its call ends
        (``server.refusal_hold_seconds``, as on HTTP). A held HTTP refusal holds its
        connection, one at a time, but a gRPC connection carries many calls: so at most
        ``held_refusals`` calls are held at once, one address at most its share of them
        (``internal.shares``); a refusal past that ends its call at once. Each is held a
        random part of the hold, from half to all of it: refused together, a flood's calls
        would otherwise come back together, and each such wave of refusals is a stop of the
        loop for every other caller."""
        self.message_seconds = message_seconds
        self.refusal_hold = refusal_hold
        self.held = FairPool("held refusals", Share(held_refusals))
        self.dialect = dialect
        self.verifier = verifier
        self.load_limits = load_limits
        self.streams = streams
        self.per_caller = per_caller
        self.relayed = relayed

    def handler(self) -> grpc.GenericRpcHandler:
        """Every method of the service, each a unary or server-streaming call."""
        service = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"]
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        for method in service.methods:
            request = message_factory.GetMessageClass(method.input_type)
            response = message_factory.GetMessageClass(method.output_type)
            # Every request is one message, but each method is served as a client stream
            # (the same bytes on the wire): the call is admitted on its metadata before
            # its message is awaited, and that wait has a deadline. The message comes as
            # raw bytes, parsed in the call, where a malformed one can be answered
            # INVALID_ARGUMENT (gRPC's own deserializer answered UNKNOWN and logged a
            # traceback per message).
            make = (grpc.stream_stream_rpc_method_handler if method.server_streaming
                    else grpc.stream_unary_rpc_method_handler)
            run = (self._streaming if method.server_streaming else self._unary)(
                method.name, request, response)
            handlers[method.name] = make(run, request_deserializer=None,
                                         response_serializer=response.SerializeToString)
        return grpc.method_handlers_generic_handler(a2a_grpc.SERVICE, handlers)

    def _admit(self, context: grpc.aio.ServicerContext[Any, Any],
               ) -> tuple[Identity, CIMultiDict[str]]:
        """The gate, as HTTP's: the peer address's bucket, then who calls, and the call's
        metadata as (case-insensitive) headers."""
        self.load_limits.address(self._client_address(context.peer()))
        headers: CIMultiDict[str] = CIMultiDict(
            (key, value) for key, value in context.invocation_metadata() or ()
            if isinstance(value, str))
        caller = self.verifier.identify(headers.get("authorization"))
        if self.per_caller is not None and (wait := self.per_caller.take(caller.name)):
            raise limited("per caller", wait)
        check_version(headers)
        return caller, headers

    async def _request(self, context: grpc.aio.ServicerContext[Any, Any],
                       request_type: type[ProtoMessage]) -> dict[str, Any]:
        """The admitted call's one request message, as proto3 JSON."""
        try:
            async with asyncio.timeout(self.message_seconds):
                raw = await context.read()
        except TimeoutError:
            raise RequestError("request_timeout", "request message not received within "
                               f"{self.message_seconds:g}s") from None
        if not isinstance(raw, bytes):  # grpc.aio.EOF: the stream ended without one
            raise RequestError("invalid_request", "no request message")
        return _parsed(raw, request_type)

    async def _held(self, context: grpc.aio.ServicerContext[Any, Any], seconds: float) -> None:
        """A refusal's hold, within the address's share of the held calls (past it: none).
        The client cancelling its call ends it (gRPC cancels the handler)."""
        if not seconds:
            return
        try:
            place = self.held.take(self._client_address(context.peer()))
        except ButlerError:  # the held calls are full, or the peer is not the front's
            return
        try:
            await asyncio.sleep(seconds * random.uniform(0.5, 1.0))  # noqa: S311 -- spread, not secrecy
        finally:
            place.release()

    def _client_address(self, peer: str) -> str:
        """The address the call comes from: behind the front, the client its socket
        carries. A call to gRPC's own socket from elsewhere would skip the front's
        connection caps: refused."""
        if self.relayed is None:
            return remote_address(peer)
        sock = peer_socket(peer)
        address = self.relayed.address(sock) if sock is not None else None
        if address is None:
            raise AuthError("forbidden", "calls come through the gRPC port")
        return address

    def _unary(self, name: str, request_type: type[ProtoMessage],
               response: type[ProtoMessage]) -> Handler:
        lenient = name == "GetExtendedAgentCard"  # the card's 0.3 fields have no proto field

        async def run(_: object, context: grpc.aio.ServicerContext[Any, Any]) -> ProtoMessage:
            slot = None
            try:
                caller, headers = self._admit(context)
                slot = self.load_limits.enter(caller.name)
                request = await self._request(context, request_type)
                result = await self.dialect.call(name, caller, request, headers)
                await _activated(context, headers)
                return a2a_grpc.from_json(result or {}, response(), lenient=lenient)
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                failed = _status(name, exc)
                hold = refusal_hold(exc, self.refusal_hold)
            finally:
                if slot is not None:
                    slot.release()
            await self._held(context, hold)
            _end(context, failed)
            return response()  # not sent: the status is not OK

        return run

    def _streaming(self, name: str, request_type: type[ProtoMessage],
                   response: type[ProtoMessage]) -> Handler:
        async def run(_: object, context: grpc.aio.ServicerContext[Any, Any],
                      ) -> AsyncIterator[ProtoMessage]:
            inflight = None
            try:
                caller, headers = self._admit(context)
                inflight = self.load_limits.enter(caller.name)
                request = await self._request(context, request_type)
                slot = (self.streams.hold(caller.name) if self.streams is not None
                        else contextlib.nullcontext())
                with slot:
                    events = await self.dialect.call(name, caller, request, headers)
                    if inflight is not None:  # a stream now: it holds a stream slot instead
                        inflight.release()
                    try:
                        await _activated(context, headers)
                        async for frame in events:
                            yield a2a_grpc.from_json(frame, response())
                    finally:
                        await events.aclose()
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                failed = _status(name, exc)
                hold = refusal_hold(exc, self.refusal_hold)
            else:
                return
            finally:
                if inflight is not None:
                    inflight.release()
            await self._held(context, hold)
            _end(context, failed)

        return run


def _parsed(raw: bytes, request_type: type[ProtoMessage]) -> dict[str, Any]:
    """A request message as proto3 JSON; a malformed one is ``invalid_request``."""
    try:
        return a2a_grpc.to_json(request_type.FromString(raw))
    except (DecodeError, ValueError, TypeError, RecursionError):
        raise RequestError("invalid_request", "malformed request message") from None


def remote_address(peer: str) -> str:
    """The address part of a gRPC peer (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``, whose
    brackets newer gRPC versions percent-encode), as aiohttp names a request's remote, so
    both carriers take from the same bucket."""
    kind, _, rest = unquote(peer).partition(":")
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]") or "?"
    if kind == "ipv4":
        return rest.rpartition(":")[0] or "?"
    return peer or "?"  # a unix socket: one bucket for its path


def peer_socket(peer: str) -> str | None:
    """The name of a gRPC peer's unix socket (``unix:/tmp/butler-grpc-x/c5``); None for
    others, and for a socket with no name (``unix:``)."""
    kind, _, name = unquote(peer).partition(":")
    return name if kind == "unix" and name else None


async def _activated(context: grpc.aio.ServicerContext[Any, Any],
                     headers: CIMultiDict[str]) -> None:
    echo = swarm_envelope.activated(headers)
    if echo:
        await context.send_initial_metadata(
            tuple((k.lower(), v) for k, v in echo.items()))


Status = tuple[grpc.StatusCode, str, tuple[tuple[str, str | bytes], ...]]


def _status(name: str, exc: Exception) -> Status:
    """The status a failed call ends with: the error's ``ERROR_TABLE`` row; anything not a
    ``ButlerError`` is logged and answered as an internal error, without its message.

    The call is ended by ``_end`` after its ``except`` block: the exception, held in the
    handler's frame while the call ended, made a cycle (exception, traceback, frame) that
    kept each refused call alive until the next collection."""
    if isinstance(exc, ButlerError):
        err = exc
    else:
        log.error("gRPC %s failed", name, exc_info=exc)
        err = Unavailable("internal_error", "internal error")
    code, message, trailing = a2a_grpc.error_status(err)
    return code, message, tuple(trailing)


def _end(context: grpc.aio.ServicerContext[Any, Any], failed: Status) -> None:
    """The call ends with ``failed`` once its handler returns (``context.abort`` raises an
    exception of its own, which gRPC then holds in a cycle too)."""
    code, message, trailing = failed
    context.set_trailing_metadata(trailing)
    context.set_code(code)
    context.set_details(message)


@dataclass
class GrpcServer:
    """The gRPC server on its unix socket and the front on the public port."""

    server: grpc.aio.Server
    front: TcpFront
    internal: str  # the server's own socket: only the front's calls are answered

    @property
    def port(self) -> int:
        return self.front.port

    async def stop(self, grace: float) -> None:
        """No new connections; calls in flight get ``grace`` seconds, then every
        connection is closed."""
        self.front.stop_accepting()
        try:
            await self.server.stop(grace)
        finally:
            await self.front.close()
            shutil.rmtree(os.path.dirname(self.internal), ignore_errors=True)


def grpc_server(binding: GrpcBinding, limits: GrpcLimits) -> grpc.aio.Server:
    """The gRPC server of ``binding``, not yet listening."""
    return grpc.aio.server(
        # No maximum_concurrent_rpcs: the binding's load limits are the daemon's one cap.
        handlers=[binding.handler()],
        options=[
            ("grpc.max_receive_message_length", limits.max_message_bytes),
            ("grpc.max_concurrent_streams", limits.max_streams_per_connection),
            ("grpc.server_handshake_timeout_ms", int(limits.handshake_seconds * 1000)),
            ("grpc.max_connection_idle_ms", int(limits.idle_seconds * 1000)),
            # gRPC sets SO_REUSEPORT by default: a second server on the same port would
            # share it silently instead of failing to start.
            ("grpc.so_reuseport", 0),
        ])


# A daemon's gRPC socket directory under $TMPDIR: this, its pid, a random part.
SOCKET_DIRECTORY = "butler-grpc-"


def sweep_socket_directories() -> None:
    """Remove the socket directories of this user's daemons that ended without removing
    theirs (kill -9): the pid in the name runs no process. A pid the kernel has given to
    another process since keeps its directory until that process ends."""
    for path in Path(tempfile.gettempdir()).glob(f"{SOCKET_DIRECTORY}*-*"):
        pid = path.name.removeprefix(SOCKET_DIRECTORY).partition("-")[0]
        try:
            if not pid.isdigit() or path.lstat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:  # gone meanwhile, or a process of another user's: not ours
            continue


async def serve(binding: GrpcBinding, listen: ListenSettings, incidents: IncidentLog, *,
                limits: GrpcLimits, tls: tuple[bytes, bytes] | None = None) -> GrpcServer:
    """A started server on ``listen.host:listen.port`` (0: any free port), behind a front
    that admits each connection as the HTTP listener does (``listen.max_connections``,
    one address's share of them, its opening bytes within
    ``listen.header_timeout_seconds``; internal/http/_tcp_front.py). gRPC itself listens
    on a unix socket in a new directory only this user may enter (a loopback port took
    any local process's connections past every cap) and answers only calls the front
    carried (``binding.relayed``).
    ``tls``: (certificate chain, private key), PEM; gRPC terminates it, the front carries
    its bytes."""
    assert binding.relayed is not None, "a fronted binding resolves peers through the front"
    sweep_socket_directories()
    directory = tempfile.mkdtemp(prefix=f"{SOCKET_DIRECTORY}{os.getpid()}-")  # mode 0700
    internal = os.path.join(directory, "grpc.sock")
    server = grpc_server(binding, limits)
    try:
        try:
            if tls is None:
                bound = server.add_insecure_port(f"unix:{internal}")
            else:
                bound = server.add_secure_port(
                    f"unix:{internal}", grpc.ssl_server_credentials([(tls[1], tls[0])]))
        except RuntimeError as exc:
            raise OSError(f"cannot listen for gRPC on {internal}: {exc}") from None
        if not bound:
            raise OSError(f"cannot listen for gRPC on {internal}")
        await server.start()
        front = TcpFront(listen, internal, HTTP2_PREFACE if tls is None else TLS_RECORD,
                         PortConnections(listen.max_connections,
                                         listen.max_connections_per_address, incidents),
                         binding.relayed)
        try:
            await front.start()
        except OSError as exc:
            await server.stop(None)
            address = f"[{listen.host}]:{listen.port}" if ":" in listen.host \
                else f"{listen.host}:{listen.port}"
            raise OSError(f"cannot listen for gRPC on {address}: {exc}") from None
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return GrpcServer(server, front, internal)
