"""A standard A2A agent's gRPC interface as a transport of ``A2AClient`` (imported only when
a card's best interface is gRPC: it needs the ``grpc`` extra).

The channel goes where the outbound guard says, as an HTTP call does: the interface's
host must be the configured peer's own (the bearer token goes nowhere else), the URL is
judged, the name is resolved once through the guard's resolver, and the channel connects
to that judged address (``ipv4:``/``ipv6:`` targets, so gRPC never resolves it again),
with no proxy from the environment. A channel serves call after call (``GrpcChannels``
keeps one per peer interface), and connects only after the new-connection check its call
was given (the peer's key, checked).
Requests and answers are the proto3 JSON the other
bindings use (``codec.a2a_grpc``); a failed call becomes the same errors as on HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc
from yarl import URL

from internal.http import ConnectionCheck, OutboundGuard
from internal.protocol.a2a.client._exchange import not_accepted
from internal.protocol.a2a.client._message import Outgoing, a2a_headers, a2a_params, task_of
from internal.protocol.a2a.codec import a2a_grpc
from internal.protocol.a2a.codec.peer_answers import peer_error
from internal.protocol.a2a.model import PROTOCOL_VERSION, ButlerError, DelegationFailed, Task

_SCHEMES = {"": None, "grpc": False, "http": False, "grpcs": True, "https": True}


def grpc_target(url: str, peer_url: str, name: str) -> tuple[URL, bool]:
    """(``http(s)://host:port``, TLS?) of a GRPC interface URL: ``host:port`` (TLS when the
    peer's own URL is https), or with a ``grpc``/``grpcs``/``http``/``https`` scheme."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if scheme.lower() not in _SCHEMES:
        raise DelegationFailed("peer_error", f"{name}: gRPC interface URL scheme {scheme!r} "
                                             "is not grpc, grpcs, http or https")
    tls = _SCHEMES[scheme.lower()]
    peer = URL(peer_url)
    if tls is None:
        tls = peer.scheme == "https"
    try:
        target = URL(("https://" if tls else "http://") + rest.split("/", 1)[0])
        host = target.host
    except ValueError:
        raise DelegationFailed("peer_error", f"{name}: malformed gRPC interface URL") from None
    if host != peer.host:
        raise DelegationFailed("peer_error", f"{name}: its card names a gRPC interface on "
                                             f"{host!r}, not on the peer's own host "
                                             f"{peer.host!r}; the token is not sent there")
    return target, tls


async def _pinned_address(guard: OutboundGuard, target: URL) -> str:
    """The one judged address the channel may connect to, as a gRPC target."""
    guard.check_target(target)
    host, port = target.raw_host or "", target.port or 0
    resolver = guard.resolver()
    try:
        address = (await resolver.resolve(host, port, socket.AF_UNSPEC))[0]["host"]
    finally:
        await resolver.close()
    return f"ipv6:[{address}]:{port}" if ":" in address else f"ipv4:{address}:{port}"


class PeerChannel:
    """One channel to a peer's gRPC interface, kept for call after call, and connected
    only after the caller's new-connection check (``ready``).

    A channel reconnects on its own: after its connection is lost it goes idle, and the
    next call opens a new one. So the channel is watched, and a call on a channel that
    left READY since its connection was checked runs the check again, then connects,
    before anything is sent. Not covered: a connection lost in the instant between that
    look and the call, which gRPC replaces for the call without asking (the answer's
    receipt is still checked against the pinned key)."""

    def __init__(self, channel: grpc.aio.Channel, connect_timeout: float) -> None:
        self.channel = channel
        # The generated stub is untyped; its calls are typed by the messages they carry.
        self.stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
        self._connect_timeout = connect_timeout
        self._checked = False  # the channel's connection was opened after a check
        self._watch: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, url: str, *, peer_url: str, name: str, guard: OutboundGuard | None,
                   ca_file: Path | None, max_response_bytes: int,
                   connect_timeout: float) -> PeerChannel:
        """The channel, not yet connected: its first call connects it."""
        target, tls = grpc_target(url, peer_url, name)
        authority = f"{target.raw_host}:{target.port}"
        address = authority if guard is None else await _pinned_address(guard, target)
        options: list[tuple[str, Any]] = [
            ("grpc.default_authority", authority),
            ("grpc.enable_http_proxy", 0),  # as the HTTP session: no proxy from the env
            ("grpc.enable_retries", 0),  # the delegator decides what is retried
            ("grpc.max_receive_message_length", max_response_bytes),
        ]
        if tls:
            roots = None if ca_file is None else await asyncio.to_thread(ca_file.read_bytes)
            options.append(("grpc.ssl_target_name_override", target.raw_host))
            channel = grpc.aio.secure_channel(
                address, grpc.ssl_channel_credentials(root_certificates=roots), options)
        else:
            channel = grpc.aio.insecure_channel(address, options)
        return cls(channel, connect_timeout)

    def _connected(self) -> bool:
        return self._checked and self.channel.get_state() == grpc.ChannelConnectivity.READY

    async def ready(self, name: str, check: ConnectionCheck | None) -> None:
        """Before each call: a connection opened after the check, else a check and one."""
        if self._connected():
            return
        async with self._lock:  # concurrent calls on a lost channel: one check, one connect
            if self._connected():
                return
            if check is not None:
                await check()
            started = time.monotonic()
            try:
                await asyncio.wait_for(self.channel.channel_ready(), self._connect_timeout)
            except TimeoutError:
                took = time.monotonic() - started
                if self.channel.get_state() != grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                    raise not_accepted(name, took) from None
                raise DelegationFailed("peer_unreachable",
                                       f"cannot connect to {name} over gRPC: every attempt "
                                       f"failed (refused or unreachable) within {took:.1f} s"
                                       ) from None
            self._checked = True
            self._watch = asyncio.create_task(self._until_lost(), name="grpc-channel-watch")

    async def _until_lost(self) -> None:
        await self.channel.wait_for_state_change(grpc.ChannelConnectivity.READY)
        self._checked = False

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        await self.channel.close()


class GrpcTransport:
    """One delegation's view of a peer's channel: its token, its name and its check."""

    version = PROTOCOL_VERSION

    def __init__(self, channel: PeerChannel, token: str, name: str,
                 check: ConnectionCheck | None) -> None:
        self._channel = channel
        self._stub = channel.stub
        self._token = token
        self._check = check
        self.name = name

    def _metadata(self, message: Outgoing) -> list[tuple[str, str]]:
        auth = [("authorization", f"Bearer {self._token}")] if self._token else []
        return auth + [(key.lower(), value)
                       for key, value in a2a_headers(message, self.version).items()]

    def _failed(self, err: grpc.aio.AioRpcError, started: float) -> ButlerError:
        code = err.code()
        took = time.monotonic() - started
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return DelegationFailed("peer_timeout",
                                    f"{self.name} did not answer within {took:.1f} s")
        infos = a2a_grpc.error_infos(err.trailing_metadata())
        if code == grpc.StatusCode.UNAVAILABLE and not infos:
            return unavailable(self.name, err.details() or "", took)
        return peer_error(self.name, {"code": code.name, "message": err.details() or "",
                                      "details": infos})

    async def send(self, message: Outgoing, deadline: float) -> Task:
        """``SendMessage``."""
        request = a2a_grpc.from_json(a2a_params(message, self.version),
                                     a2a_pb2.SendMessageRequest())
        await self._channel.ready(self.name, self._check)
        started = time.monotonic()
        try:
            reply = await self._stub.SendMessage(request, metadata=self._metadata(message),
                                                 timeout=_left(deadline))
        except grpc.aio.AioRpcError as err:
            raise self._failed(err, started) from None
        return task_of(a2a_grpc.to_json(reply), self.version, self.name)

    async def task(self, task_id: str, message: Outgoing, deadline: float) -> Task:
        await self._channel.ready(self.name, self._check)
        started = time.monotonic()
        try:
            reply = await self._stub.GetTask(a2a_pb2.GetTaskRequest(id=task_id),
                                             metadata=self._metadata(message),
                                             timeout=_left(deadline))
        except grpc.aio.AioRpcError as err:
            raise self._failed(err, started) from None
        return task_of(a2a_grpc.to_json(reply), self.version, self.name)

    async def cancel(self, task_id: str, message: Outgoing, deadline: float) -> Task:
        """``CancelTask``."""
        await self._channel.ready(self.name, self._check)
        started = time.monotonic()
        try:
            reply = await self._stub.CancelTask(a2a_pb2.CancelTaskRequest(id=task_id),
                                                metadata=self._metadata(message),
                                                timeout=_left(deadline))
        except grpc.aio.AioRpcError as err:
            raise self._failed(err, started) from None
        return task_of(a2a_grpc.to_json(reply), self.version, self.name)

    async def stream(self, message: Outgoing, deadline: float) -> AsyncIterator[Any]:
        """``SendStreamingMessage``: each ``StreamResponse`` as proto3 JSON."""
        request = a2a_grpc.from_json(a2a_params(message, self.version),
                                     a2a_pb2.SendMessageRequest())
        await self._channel.ready(self.name, self._check)
        started = time.monotonic()
        call = self._stub.SendStreamingMessage(request, metadata=self._metadata(message),
                                               timeout=_left(deadline))
        try:
            async for reply in call:
                yield a2a_grpc.to_json(reply)
        except grpc.aio.AioRpcError as err:
            raise self._failed(err, started) from None
        finally:
            call.cancel()  # a reader that stops early ends the call


# What gRPC's "unavailable" details say, as the same words the HTTP transports use.
_UNAVAILABLE = (("connection refused", "connection refused (nothing listens at that address "
                                       "and port)"),
                ("no route to host", "no route to host (the machine is off or not on this "
                                     "network)"),
                ("network is unreachable", "network unreachable"),
                ("dns resolution failed", "its host name does not resolve"),
                ("handshake", "the TLS handshake failed"),
                ("ssl", "the TLS handshake failed"))


def unavailable(name: str, details: str, took: float) -> DelegationFailed:
    """A call gRPC could not make: what its details say happened."""
    low = details.lower()
    what = next((said for found, said in _UNAVAILABLE if found in low), None)
    if what is not None and "TLS" in what:
        return DelegationFailed("peer_tls_error", f"{name}: {what}")
    if what is not None:
        return DelegationFailed("peer_unreachable",
                                f"cannot connect to {name}: {what} after {took:.1f} s")
    return DelegationFailed("peer_unreachable", f"{name}: gRPC unavailable after {took:.1f} s")


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)
