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
from a2a.types import AgentCard
from google.protobuf import json_format

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
class _UnaryBearer(_Bearer, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_unary(self, continuation: Continuation,
                                    details: grpc.aio.ClientCallDetails, request: Any) -> Any:
        return await continuation(self.with_token(details), request)


class _StreamBearer(_Bearer, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_stream(self, continuation: Continuation,
                                     details: grpc.aio.ClientCallDetails, request: Any) -> Any:
        return await continuation(self.with_token(details), request)


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
