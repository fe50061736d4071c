"""A2A 1.0 over gRPC: the official a2a-sdk gRPC client against a real Butler, on the same
engine, auth and swarm envelope as the HTTP bindings."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grpc", reason="the gRPC binding needs the grpc extra "
                                   "(pip install 'butler-a2a[grpc]')")

import grpc
from a2a.types import (
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskNotFoundError,
    TaskState,
)
from google.protobuf.json_format import MessageToDict
from google.rpc import error_details_pb2, status_pb2
from yarl import URL

from butler.identity.key_file import KEY_FILE
from internal.http import OutboundGuard
from internal.protocol.a2a.client import Interface, offered_interfaces
from internal.protocol.a2a.client import _a2a as a2a_client
from internal.protocol.a2a.model import DelegationFailed, OutboundRefused
from internal.protocol.a2a.model import TaskState as ButlerState
from tests.a2a_support import (
    WAIT,
    cancel_a_waiting_task,
    send_request,
    send_task,
    text,
    user_message,
)
from tests.delegation_support import Mesh, butler_with_peer, free_port, skill
from tests.grpc_support import card_of, channel, grpc_client, service_stub
from tests.sdk_agent import sdk_agent
from tests.support import ECHO, Swarm, new_pair, post_task
from tests.test_peer_identity import (
    card_reads,
    delegate,
    office_task_count,
    restart,
)
from tests.test_tls import OPENSSL, make_ca_and_cert

GRPC = {"a2a": {"grpc_port": 0}}
SWARM_URI = "urn:butler:a2a:ext:swarm:v1"


def error_info(err: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            info = error_details_pb2.ErrorInfo()
            assert status.details[0].Unpack(info)
            return info
    raise AssertionError("no google.rpc.Status in the trailing metadata")


async def test_the_card_lists_grpc_only_when_it_is_served(swarm: Swarm) -> None:
    plain = await swarm.start("plain")
    assert "GRPC" not in [i.protocol_binding for i in (await card_of(plain)).supported_interfaces]
    home = await swarm.start("home", configurations=GRPC)
    interfaces = {i.protocol_binding: i for i in (await card_of(home)).supported_interfaces}
    assert interfaces["GRPC"].url == f"127.0.0.1:{home.daemon.grpc_port}"
    assert interfaces["GRPC"].protocol_version == "1.0"


async def test_send_get_list_with_the_sdk_grpc_client(swarm: Swarm) -> None:
    home = await swarm.start("home", configurations=GRPC)
    async with grpc_client(home) as client:
        task = await send_task(client, send_request(user_message(text("hello")),
                                                    history_length=5))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert [p.text for a in task.artifacts for p in a.parts] == ["hello"]
        assert [m.parts[0].text for m in task.history] == ["hello"]
        assert MessageToDict(task.metadata)[SWARM_URI]["skill"] == "echo"

        got = await client.get_task(GetTaskRequest(id=task.id, history_length=0))
        assert got.id == task.id and not got.history
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        page = await client.list_tasks(ListTasksRequest(page_size=10))
        assert [t.id for t in page.tasks] == [task.id]
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))


async def test_stream_with_the_sdk_grpc_client(swarm: Swarm) -> None:
    home = await swarm.start("home", configurations=GRPC)
    async with grpc_client(home, streaming=True) as client:
        events = [e async for e in client.send_message(send_request(user_message(text("hi"))))]
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task" and kinds[-1] == "status_update", kinds
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert [p.text for a in artifacts for p in a.parts] == ["hi"]


async def test_cancel_with_the_sdk_grpc_client(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, WAIT], configurations=GRPC)
    async with grpc_client(home) as client:
        await cancel_a_waiting_task(client, home)


async def test_a_wrong_token_is_unauthenticated(swarm: Swarm) -> None:
    home = await swarm.start("home", configurations=GRPC)
    assert home.daemon.grpc_url is not None
    async with channel(home.daemon.grpc_url, "not-the-token") as chan:
        stub = service_stub(chan)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetTask(GetTaskRequest(id="x"), metadata=[("a2a-version", "1.0")])
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error_info(caught.value).metadata["code"] == "unauthenticated"


async def test_a_loop_in_the_metadata_chain_is_refused(swarm: Swarm) -> None:
    """The envelope rides in message metadata and in x-swarm-* metadata, as on HTTP."""
    home = await swarm.start("home", callers={"office": {}}, configurations=GRPC)
    assert home.daemon.grpc_url is not None
    request = SendMessageRequest(message=user_message(text("x"), metadata={
        SWARM_URI: {"callerChain": ["home", "office"], "depth": 2}}))
    async with channel(home.daemon.grpc_url, home.tokens["office"]) as chan:
        stub = service_stub(chan)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.SendMessage(request, metadata=[("a2a-version", "1.0")])
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        info = error_info(caught.value)
        assert (info.reason, info.domain, info.metadata["code"]) == (
            "LOOP_DETECTED", "butler", "loop_detected")
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # the same, in headers
            await stub.SendMessage(SendMessageRequest(message=user_message(text("x"))),
                                   metadata=[("a2a-version", "1.0"),
                                             ("x-swarm-agent-chain", "home,office"),
                                             ("x-swarm-depth", "2")])
        assert error_info(caught.value).metadata["code"] == "loop_detected"
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # no version: 0.3, not served
            await stub.GetTask(GetTaskRequest(id="x"))
        assert error_info(caught.value).reason == "VERSION_NOT_SUPPORTED"


async def test_a_wrong_token_to_a_grpc_agent_fails_cleanly(swarm: Swarm) -> None:
    token, _ = new_pair()
    async with sdk_agent(token, binding="GRPC") as agent:
        home = await butler_with_peer(swarm, agent.url, "not-the-token")
        _, task = await post_task(home, {"task": "hi", "capabilities_needed": ["shout"]})
    assert task["state"] == "failed" and task["error"]["code"] == "peer_error", task
    assert "UNAUTHENTICATED" in task["error"]["message"]


async def test_delegations_share_a_channel_checked_once(swarm: Swarm) -> None:
    """One channel per peer, kept across delegations: key continuity reads the agent's
    public card (no token) before its connection opens, not before each call."""
    token, _ = new_pair()
    async with sdk_agent(token, binding="GRPC") as agent:
        home = await butler_with_peer(swarm, agent.url, token)
        for _ in range(3):
            _, task = await post_task(home, {"task": "hi", "capabilities_needed": ["shout"]})
            assert task["state"] == "completed", task
        card_reads = [h for h in agent.seen.headers if "authorization" not in h]
        calls = [h for h in agent.seen.headers if "authorization" in h]
    assert (len(card_reads), len(calls)) == (1, 3)


def prefer_grpc(card: Mapping[str, Any], peer: str) -> Interface:
    """A Butler offers JSON-RPC first; these tests make its caller take its gRPC port."""
    return next(i for i in offered_interfaces(card) if i.binding == "GRPC")


async def test_a_kept_channel_still_refuses_a_swapped_key(
        mesh: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    """The peer restarts with another key on the same ports: the kept channel lost its
    connection, so the next call checks the card before it connects, and is refused
    before the token goes."""
    monkeypatch.setattr(a2a_client, "choose_interface", prefer_grpc)
    mesh.agent("home", skills=[])
    mesh.agent("office", skills=[skill("x.work")],
               configurations={"a2a": {"grpc_port": free_port()}})
    mesh.link("home", "office", ["x.work"], protocol="a2a")
    agents = await mesh.start()
    home, office = agents["home"], agents["office"]
    for _ in range(3):
        assert await delegate(home) == (ButlerState.COMPLETED, "")
    assert card_reads(office.daemon) == 1  # one connection, checked once
    assert await office_task_count(mesh, office.url, office) == 3
    (office.daemon.config.data_dir / KEY_FILE).unlink()
    swapped = await restart(office)
    try:
        assert await delegate(home) == (ButlerState.FAILED, "peer_identity_changed")
        assert card_reads(swapped) == 1  # the check's read, then no call
        assert await office_task_count(mesh, swapped.url, office) == 3
    finally:
        await swapped.stop()
        office.daemon = swapped  # stopped: the mesh's teardown stops it once more


def test_the_token_goes_only_to_the_peers_own_host() -> None:
    from internal.protocol.a2a.client._grpc import grpc_target

    assert grpc_target("127.0.0.1:5000", "http://127.0.0.1:8081", "p") == (
        URL("http://127.0.0.1:5000"), False)
    assert grpc_target("peer.lan:443", "https://peer.lan", "p")[1] is True
    assert grpc_target("grpcs://peer.lan:443", "http://peer.lan:80", "p")[1] is True
    for elsewhere in ("evil.example:443", "169.254.169.254:80", "grpc://localhost:1"):
        with pytest.raises(DelegationFailed, match="the token is not sent there"):
            grpc_target(elsewhere, "http://127.0.0.1:8081", "p")
    with pytest.raises(DelegationFailed, match="scheme"):
        grpc_target("unix:///tmp/sock", "http://127.0.0.1:8081", "p")


async def test_the_grpc_channel_goes_through_the_outbound_guard() -> None:
    """Loopback is refused under the default rules, as for an HTTP call."""
    from internal.protocol.a2a.client import GrpcChannels

    channels = GrpcChannels()
    with pytest.raises(OutboundRefused, match="loopback"):
        async with channels.peer("127.0.0.1:1", "t", peer_url="http://127.0.0.1:2", name="p",
                                 guard=OutboundGuard(), ca_file=None, max_response_bytes=1024,
                                 connect_timeout=1):
            pass
    assert len(channels) == 0


async def test_the_kept_channels_are_bounded_and_closed_with_their_owner() -> None:
    """Past the bound the least recently used channel closes, once its call is done."""
    from internal.protocol.a2a.client import GrpcChannels

    def state(peer: Any) -> grpc.ChannelConnectivity:
        connectivity: grpc.ChannelConnectivity = peer._channel.channel.get_state()
        return connectivity

    channels = GrpcChannels(size=1)
    args: dict[str, Any] = {"peer_url": "http://127.0.0.1:2", "name": "p", "guard": None,
                            "ca_file": None, "max_response_bytes": 1024, "connect_timeout": 1}
    async with channels.peer("127.0.0.1:1", "t", **args) as first:
        async with channels.peer("127.0.0.1:3", "t", **args) as second:
            assert len(channels) == 1
            assert state(first) != grpc.ChannelConnectivity.SHUTDOWN  # still in use
        assert state(second) != grpc.ChannelConnectivity.SHUTDOWN  # kept
    assert state(first) == grpc.ChannelConnectivity.SHUTDOWN
    async with channels.peer("127.0.0.1:3", "t", **args) as again:
        assert again._channel is second._channel  # the same channel, reused
    await channels.aclose()
    assert len(channels) == 0 and state(second) == grpc.ChannelConnectivity.SHUTDOWN


async def test_the_trace_arrives_in_grpc_metadata(swarm: Swarm) -> None:
    home = await swarm.start("home", configurations=GRPC)
    assert home.daemon.grpc_url is not None
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    async with channel(home.daemon.grpc_url, home.tokens["operator"]) as chan:
        reply = await service_stub(chan).SendMessage(
            send_request(user_message(text("hi"))),
            metadata=[("a2a-version", "1.0"), ("a2a-extensions", SWARM_URI),
                      ("traceparent", f"00-{trace_id}-00f067aa0ba902b7-01")])
    assert dict(reply.task.metadata)[SWARM_URI]["traceId"] == trace_id


@pytest.mark.skipif(OPENSSL is None, reason="openssl makes the test certificates")
async def test_grpc_over_tls_when_the_http_port_has_it(swarm: Swarm, tmp_path: Path) -> None:
    ca, cert, key = make_ca_and_cert(tmp_path, "home")
    tls = {"tls": {"cert_file": str(cert), "key_file": str(key)}}
    home = await swarm.start("home", configurations={"a2a": {"grpc_port": 0, **tls}})
    assert home.daemon.grpc_url is not None
    metadata = [("a2a-version", "1.0"), ("authorization", f"Bearer {home.tokens['operator']}")]
    credentials = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
    async with grpc.aio.secure_channel(home.daemon.grpc_url, credentials) as chan:
        reply = await service_stub(chan).SendMessage(
            send_request(user_message(text("secure"))), metadata=metadata)
    assert reply.task.status.state == TaskState.TASK_STATE_COMPLETED
    async with grpc.aio.insecure_channel(home.daemon.grpc_url) as chan:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await service_stub(chan).GetTask(GetTaskRequest(id="x"),
                                                            metadata=metadata, timeout=5)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_card_push_configs_and_subscribe_over_grpc(swarm: Swarm) -> None:
    home = await swarm.start("home", configurations=GRPC)
    assert home.daemon.grpc_url is not None
    v1 = [("a2a-version", "1.0")]
    async with channel(home.daemon.grpc_url, home.tokens["operator"]) as chan:
        stub = service_stub(chan)
        card = await stub.GetExtendedAgentCard(GetExtendedAgentCardRequest(), metadata=v1)
        assert card.name == "home butler" and "GRPC" in [
            i.protocol_binding for i in card.supported_interfaces]
        task = (await stub.SendMessage(send_request(user_message(text("x"))),
                                       metadata=v1)).task
        configs = await stub.ListTaskPushNotificationConfigs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id), metadata=v1)
        assert list(configs.configs) == []
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in stub.SubscribeToTask(SubscribeToTaskRequest(id=task.id),
                                                metadata=v1):
                pass
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert error_info(caught.value).reason == "UNSUPPORTED_OPERATION"
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # bad input: a clear error
            await stub.SendMessage(SendMessageRequest(), metadata=v1)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT

