"""The gRPC port is admitted as the HTTP port is, by the same load limits: one in-flight
count, one bucket per address (before authentication), one bucket per caller. A client
holds one share of the daemon whichever port it calls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest

pytest.importorskip("grpc", reason="the gRPC binding needs the grpc extra "
                                   "(pip install 'butler-a2a[grpc]')")

import grpc
from a2a.types import GetExtendedAgentCardRequest

from butler.http_app import A2A_FRONT
from internal.protocol.a2a.model import Identity
from tests.a2a_support import WAIT, send_request, text, user_message
from tests.grpc_support import channel, service_stub
from tests.support import ECHO, Instance, Swarm, wait_until
from tests.test_a2a_grpc import GRPC, error_info

V1 = [("a2a-version", "1.0")]
ADMIN = Identity("test", "admin")


async def until_inflight(inst: Instance, count: int) -> None:
    """Until the daemon's load limits count ``count`` requests in flight."""
    load_limits = inst.daemon.app[A2A_FRONT].load_limits
    await wait_until(lambda: load_limits.inflight == count, what=f"{count} in flight")


async def cancel_running(inst: Instance, held: list[asyncio.Task[Any]]) -> None:
    """Cancels the ``wait`` tasks (their requests then answer) and awaits the holders."""
    engine = inst.daemon.engine
    page = await engine.list_tasks(ADMIN, state=None, context_id=None, cursor=None, limit=100)
    for task in page.tasks:
        if task.state.value == "working":
            await engine.cancel(ADMIN, task.id)
    async with asyncio.timeout(10):
        await asyncio.gather(*held, return_exceptions=True)


def hold_http(inst: Instance) -> asyncio.Task[Any]:
    async def post() -> int:
        async with inst.session.post(f"{inst.url}/v2/tasks", headers=inst.headers(),
                                     json={"task": "x", "skill": "wait"}) as resp:
            return resp.status

    return asyncio.create_task(post())


def hold_grpc(inst: Instance, chan: grpc.aio.Channel) -> asyncio.Task[Any]:
    request = send_request(user_message(text("x"), metadata={"skill": "wait"}))
    call: Awaitable[Any] = service_stub(chan).SendMessage(request, metadata=V1)
    return asyncio.ensure_future(call)


async def grpc_card(inst: Instance, chan: grpc.aio.Channel) -> Any:
    return await service_stub(chan).GetExtendedAgentCard(GetExtendedAgentCardRequest(),
                                                       metadata=V1)


@pytest.fixture
async def capped(swarm: Swarm) -> AsyncIterator[Instance]:
    yield await swarm.start("home", skills=[ECHO, WAIT], configurations=GRPC,
                            extra={"server": {"max_inflight": 2},
                                   # one caller may fill the pool here (its share is all)
                                   "shares": {"inflight": {"per_caller": 2}}})


async def test_requests_held_over_http_fill_the_cap_for_grpc(capped: Instance) -> None:
    assert capped.daemon.grpc_url is not None
    async with channel(capped.daemon.grpc_url, capped.tokens["operator"]) as chan:
        held = [hold_http(capped), hold_http(capped)]
        await until_inflight(capped, 2)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await grpc_card(capped, chan)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert error_info(caught.value).metadata["code"] == "overloaded"
        assert int(dict(caught.value.trailing_metadata())["retry-after"]) >= 1
        await cancel_running(capped, held)
        assert (await grpc_card(capped, chan)).name == "home butler"
    await until_inflight(capped, 0)  # each unary call gave its place back


async def test_calls_held_over_grpc_fill_the_cap_for_http(capped: Instance) -> None:
    assert capped.daemon.grpc_url is not None
    async with channel(capped.daemon.grpc_url, capped.tokens["operator"]) as chan:
        held = [hold_grpc(capped, chan), hold_grpc(capped, chan)]
        await until_inflight(capped, 2)
        async with capped.session.get(f"{capped.url}/v2/card",
                                      headers=capped.headers()) as resp:
            assert resp.status == 503
            assert resp.headers["Retry-After"].isdigit()
            assert (await resp.json())["error"]["code"] == "overloaded"
        await cancel_running(capped, held)
    await until_inflight(capped, 0)
    async with capped.session.get(f"{capped.url}/v2/card", headers=capped.headers()) as resp:
        assert resp.status == 200


async def test_a_grpc_stream_gives_its_place_back(capped: Instance) -> None:
    """A stream takes a stream slot instead, as an HTTP event stream does."""
    assert capped.daemon.grpc_url is not None
    request = send_request(user_message(text("x"), metadata={"skill": "wait"}))
    async with channel(capped.daemon.grpc_url, capped.tokens["operator"]) as chan:
        streams = [service_stub(chan).SendStreamingMessage(request, metadata=V1)
                   for _ in range(3)]  # more than max_inflight
        for call in streams:
            await call.read()  # the stream has begun: its first event
        await until_inflight(capped, 0)
        assert capped.daemon.app[A2A_FRONT].streams.in_use == 3
        assert (await grpc_card(capped, chan)).name == "home butler"
        for call in streams:
            call.cancel()
    await cancel_running(capped, [])


async def test_the_per_address_limit_counts_grpc_calls_before_auth(swarm: Swarm) -> None:
    home = await swarm.start("home", configurations=GRPC, extra={"rate_limits": {
        "per_address_per_second": 0.001, "per_address_burst": 3,
        "per_caller_per_second": 0}})
    assert home.daemon.grpc_url is not None
    async with home.session.get(f"{home.url}/v2/card",
                                headers={"Authorization": "Bearer wrong"}) as resp:
        assert resp.status == 401  # one of the three in the address's bucket
    async with channel(home.daemon.grpc_url, "wrong") as chan:
        codes = []
        for _ in range(3):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await grpc_card(home, chan)
            codes.append(caught.value.code())
    assert codes == [grpc.StatusCode.UNAUTHENTICATED] * 2 + [
        grpc.StatusCode.RESOURCE_EXHAUSTED]
    assert error_info(caught.value).metadata["code"] == "rate_limited"
    assert int(dict(caught.value.trailing_metadata())["retry-after"]) >= 1
    async with home.session.get(f"{home.url}/v2/card", headers=home.headers()) as resp:
        assert resp.status == 429  # the same bucket, whichever port, whatever token


async def test_the_per_caller_limit_is_one_limit_across_ports(swarm: Swarm) -> None:
    home = await swarm.start("home", configurations=GRPC, extra={"rate_limits": {
        "per_caller_per_second": 0.001, "per_caller_burst": 2, "per_address_per_second": 0}})
    assert home.daemon.grpc_url is not None
    async with home.session.get(f"{home.url}/v2/card", headers=home.headers()) as resp:
        assert resp.status == 200  # one of the two in the bucket
    async with channel(home.daemon.grpc_url, home.tokens["operator"]) as chan:
        await grpc_card(home, chan)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await grpc_card(home, chan)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(caught.value).metadata["code"] == "rate_limited"
    assert int(dict(caught.value.trailing_metadata())["retry-after"]) >= 1
    async with home.session.get(f"{home.url}/v2/card", headers=home.headers()) as resp:
        assert resp.status == 429  # and the gRPC calls count on the HTTP port


def test_a_grpc_peer_is_keyed_by_its_address_as_an_http_remote_is() -> None:
    from internal.protocol.a2a.server.grpc_binding import remote_address

    assert remote_address("ipv4:127.0.0.1:50123") == "127.0.0.1"
    assert remote_address("ipv6:[::1]:50123") == "::1"
    assert remote_address("ipv6:%5B::1%5D:50123") == "::1"
    assert remote_address("unix:/run/butler.sock") == "unix:/run/butler.sock"
    assert remote_address("") == "?"
