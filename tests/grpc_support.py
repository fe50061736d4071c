"""The official a2a-sdk over gRPC: a client channel that sends a bearer token, and the
sdk's own gRPC server as a peer. Imported only by tests that skip without the grpc extra."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.server.request_handlers import GrpcHandler, RequestHandler
from a2a.types import AgentCard, a2a_pb2_grpc
from google.protobuf import json_format

from tests.sdk_agent import Seen
from tests.support import Instance

Continuation = Callable[[grpc.aio.ClientCallDetails, Any], Any]


class _Bearer:
    """Adds ``authorization: Bearer <token>`` to every call, as the HTTP clients do."""

    def __init__(self, token: str) -> None:
        self.token = token

    def with_token(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = [*(details.metadata or ()), ("authorization", f"Bearer {self.token}")]
        return details._replace(metadata=metadata)  # type: ignore[attr-defined,no-any-return]


# grpc.aio files an interceptor under its first matching kind only: one class per kind.
class _UnaryBearer(_Bearer, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Continuation,
                                    details: grpc.aio.ClientCallDetails, request: Any) -> Any:
        return await continuation(self.with_token(details), request)


class _StreamBearer(_Bearer, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Continuation,
                                     details: grpc.aio.ClientCallDetails, request: Any) -> Any:
        return await continuation(self.with_token(details), request)


def service_stub(chan: grpc.aio.Channel) -> Any:
    """The sdk's generated gRPC stub (generated code without annotations)."""
    return a2a_pb2_grpc.A2AServiceStub(chan)  # type: ignore[no-untyped-call]


def channel(target: str, token: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(target, interceptors=[_UnaryBearer(token),
                                                           _StreamBearer(token)])


async def card_of(inst: Instance) -> AgentCard:
    async with httpx.AsyncClient(timeout=20) as http:
        resp = await http.get(inst.url + "/.well-known/agent-card.json")
    return json_format.Parse(resp.text, AgentCard(), ignore_unknown_fields=True)


@contextlib.asynccontextmanager
async def grpc_client(inst: Instance, who: str = "operator", *, streaming: bool = False,
                      token: str | None = None) -> AsyncIterator[Client]:
    """The official client, built from the agent's card, speaking only gRPC."""
    secret = token or inst.tokens[who]
    config = ClientConfig(streaming=streaming, supported_protocol_bindings=["GRPC"],
                          grpc_channel_factory=lambda url: channel(url, secret))
    client = ClientFactory(config).create(await card_of(inst))
    try:
        yield client
    finally:
        await client.close()


class _CheckBearer(grpc.aio.ServerInterceptor):
    """The sdk agent's auth: records each call's metadata, refuses a wrong token."""

    def __init__(self, token: str, seen: Seen) -> None:
        self.token = token
        self.seen = seen

    async def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        metadata = {k: v for k, v in details.invocation_metadata if isinstance(v, str)}
        self.seen.headers.append(metadata)
        if metadata.get("authorization") != f"Bearer {self.token}":
            async def deny(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong token")

            return grpc.unary_unary_rpc_method_handler(deny)
        return await continuation(details)


def sdk_grpc_server(token: str, seen: Seen) -> tuple[grpc.aio.Server, str]:
    """The a2a-sdk's gRPC service, bound to 127.0.0.1 port 0 (not yet started), and its
    interface URL as the sdk's own samples write it (host:port)."""
    server = grpc.aio.server(interceptors=[_CheckBearer(token, seen)])
    port = server.add_insecure_port("127.0.0.1:0")
    return server, f"127.0.0.1:{port}"


async def start_sdk_grpc_server(server: grpc.aio.Server, handler: RequestHandler) -> None:
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(  # type: ignore[no-untyped-call]
        GrpcHandler(handler), server)
    await server.start()
