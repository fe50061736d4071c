"""Every hostile URL (tests/hostile_urls.py) refused on every path that calls out, under
the most lenient rules each path can have, with no connection reaching the listener:

- push: a config created through the daemon's A2A binding, and a delivery to a URL
  stored before (or resolving differently since) its check;
- a static peer: in the daemon's config (the delegated task fails with
  ``peer_address_refused``), and a candidate handed to the delegator as such;
- a peer found in a real registry on port 0 whose entries advertise the URLs;
- an agent card fetch, and an interface URL a card advertises.

The CLI's blocking transport refuses the same corpus in tests/test_blocking_client.py.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from opentelemetry import trace

from butler.config import ConfigError, load_config
from butler.config.model import PeerConfig
from butler.delegation.delegator import PeerDelegator
from butler.delegation.discovery import RegistryDiscovery
from butler.delegation.peers import Candidate
from butler.delegation.wiring import make_delegator
from butler.push.dispatcher import PushDispatcher
from butler.registry.client import RegistryClient
from internal.http import CONFIGURED, OutboundGuard, OutboundRules, outbound_session
from internal.protocol.a2a.client import A2AClient
from internal.protocol.a2a.model import (
    DelegationFailed,
    PushConfig,
    StatusEntry,
    Task,
    TaskEvent,
    TaskRequest,
    TaskState,
)
from tests.a2a_support import ASK, plain_message, rpc
from tests.hostile_urls import HostileNames, Listener, hostile_urls
from tests.registry.registry_support import TOKENS, LiveRegistry, make_card, sqlite_registry
from tests.support import ECHO, Swarm, config_dict

SECRET = "secret-token-never-in-a-message"


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    async with Listener().running() as running:
        yield running
    assert running.connections == 0, "a hostile URL reached the listener"


def status_event() -> TaskEvent:
    at = "2026-01-01T00:00:00.000000Z"
    return TaskEvent(Task(id="t", context_id="c", owner="o", state=TaskState.WORKING,
                          request=TaskRequest(), created_at=at, updated_at=at,
                          history=(StatusEntry(TaskState.WORKING, at),)), "status")


def lenient(names: HostileNames, rules: OutboundRules = CONFIGURED) -> OutboundGuard:
    return OutboundGuard(rules, names=lambda: names)


def assert_refused(err: DelegationFailed, url: str) -> None:
    assert err.code == "peer_address_refused", (url, err.code, err.message)
    assert SECRET not in err.message


# -- push ------------------------------------------------------------------------------------

async def test_push_configs_are_refused_at_creation(swarm: Swarm, listener: Listener) -> None:
    names = HostileNames()
    guard = lenient(names, OutboundRules(allow_loopback=True, allow_private=True))
    home = await swarm.start("home", skills=[ECHO, ASK], daemon_kwargs={"push_guard": guard},
                             extra={"server": {"shutdown_grace_seconds": 0.2}})
    _, body = await rpc(home, "SendMessage", {"message": plain_message(
        "hi", metadata={"skill": "ask"})})
    task_id = body["result"]["task"]["id"]
    for url in hostile_urls(listener.port):
        status, body = await rpc(home, "CreateTaskPushNotificationConfig",
                                 {"taskId": task_id, "url": url})
        assert status == 200 and body["error"]["code"] == -32602, (url, body)
    _, body = await rpc(home, "ListTaskPushNotificationConfigs", {"taskId": task_id})
    assert body["result"].get("configs", []) == []


async def test_push_deliveries_to_hostile_urls_are_dropped_and_logged(
    listener: Listener, caplog: pytest.LogCaptureFixture,
) -> None:
    names = HostileNames()
    dispatcher = PushDispatcher(lenient(names), max_attempts=2, timeout=2, backoff=0.01)
    event = status_event()
    try:
        with caplog.at_level(logging.INFO, logger="butler.push"):
            for url in hostile_urls(listener.port):
                config = PushConfig(id="c", task_id="t", url=url, token=SECRET)
                assert not await dispatcher.deliver(config, event), url
    finally:
        await dispatcher.aclose()
    assert SECRET not in caplog.text


async def test_a_webhook_that_resolves_to_metadata_later_is_dropped(
    listener: Listener, caplog: pytest.LogCaptureFixture,
) -> None:
    names = HostileNames({"hook.test": ["93.184.216.34"]})
    guard = lenient(names, OutboundRules())
    url = f"http://hook.test:{listener.port}/?key={SECRET}"
    await guard.check_url(url)  # what creating the config checks
    names.names["hook.test"] = ("169.254.169.254",)
    dispatcher = PushDispatcher(guard, max_attempts=3, timeout=2, backoff=0.01)
    try:
        with caplog.at_level(logging.WARNING, logger="butler.push"):
            assert not await dispatcher.deliver(PushConfig(id="c", task_id="t", url=url),
                                                status_event())
    finally:
        await dispatcher.aclose()
    assert "dropped" in caplog.text and "hook.test" in caplog.text
    assert SECRET not in caplog.text
    assert names.asked.count("hook.test") == 2, "the check, then one delivery: never retried"


# -- static peers ----------------------------------------------------------------------------

def delegator(names: HostileNames, static: list[Candidate] = (),  # type: ignore[assignment]
              **kwargs: Any) -> PeerDelegator:
    return PeerDelegator(agent_id="home", static=static, tracer=trace.get_tracer("test"),
                         audit=lambda *a, **k: None, max_concurrency=8,
                         names=lambda: names, **kwargs)


async def send(peers: PeerDelegator, capability: str) -> None:
    """A delegation as a run makes it: planned (the peers chosen), then sent."""
    await peers.delegate(plan=await peers.plan((capability,), ("home",)),
                         request=TaskRequest(text="x", capabilities_needed=(capability,)),
                         chain=("home",), budget=Decimal("1"), deadline=time.monotonic() + 5)


async def test_static_candidates_are_refused(listener: Listener) -> None:
    urls = hostile_urls(listener.port)
    cands = [Candidate(name=f"h{i}", url=url, token=SECRET, capabilities=(f"cap{i}",),
                       connect_timeout=1.0, timeout=2.0) for i, url in enumerate(urls)]
    for protocol in ("butler", "a2a"):
        peers = delegator(HostileNames(), [Candidate(**{**c.__dict__, "protocol": protocol})
                                           for c in cands])
        try:
            for i, url in enumerate(urls):
                with pytest.raises(DelegationFailed) as info:
                    await send(peers, f"cap{i}")
                assert_refused(info.value, url)
        finally:
            await peers.aclose()


async def test_static_peers_in_the_config_fail_the_task(
    swarm: Swarm, tmp_path: Path, listener: Listener,
) -> None:
    token_file = tmp_path / "peer.token"
    token_file.write_text(SECRET)
    peers: list[dict[str, Any]] = []
    refused_at_load: list[str] = []
    for i, url in enumerate(hostile_urls(listener.port)):
        peer: dict[str, Any] = {"name": f"h{i}", "url": url, "capabilities": [f"cap{i}"],
                                "token_file": str(token_file), "timeout_seconds": 2}
        cfg, _ = config_dict(tmp_path, "probe", peers=[peer])
        path = tmp_path / "probe.yaml"
        path.write_text(yaml.safe_dump(cfg))
        try:
            load_config(path)
        except ConfigError:
            refused_at_load.append(url)  # the config itself says no: start-up stops
            continue
        peers.append(peer)
    assert len(peers) >= 30, "most hostile URLs look like URLs: the guard must say no"
    home = await swarm.start("home", skills=[], peers=peers, daemon_kwargs={
        "delegator_factory": functools.partial(make_delegator, names=HostileNames)})
    client = home.client()
    for peer in peers:
        task = await client.submit(TaskRequest(text="x", capabilities_needed=(
            peer["capabilities"][0],)))
        assert task.state is TaskState.FAILED, peer
        assert task.error is not None and task.error.code == "peer_address_refused", (
            peer["url"], task.error)
        assert SECRET not in task.error.message


# -- peers found in a registry ---------------------------------------------------------------

@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[LiveRegistry]:
    async with sqlite_registry(tmp_path, max_names_per_identity=1000) as reg:
        yield reg


async def test_registry_entries_are_never_candidates(
    registry: LiveRegistry, http: aiohttp.ClientSession, listener: Listener,
) -> None:
    card = make_card("Hostile", caps=("hostile.cap",))
    admitted = 0
    for i, url in enumerate(hostile_urls(listener.port)):
        async with http.put(f"{registry.url}/v1/agents/h{i}", json={
                "card": card, "url": url, "ttl_seconds": 60},
                headers={"Authorization": f"Bearer {TOKENS['alice']}"}) as resp:
            assert resp.status in (201, 400), (url, resp.status)  # 400: the registry says no
            admitted += resp.status == 201
    assert admitted >= 30
    names = HostileNames()
    client = RegistryClient(registry.url, TOKENS["root"], session=http)
    discovery = RegistryDiscovery(client, self_name="home", peer_token=SECRET, static=(),
                                  guard=lenient(names), cache_seconds=0,
                                  trusted_registrants=("alice",))
    assert await discovery(["hostile.cap"]) == []
    assert await discovery.routable() == ()  # nor candidates of the intent router
    peers = delegator(names, discover=discovery)
    try:
        with pytest.raises(DelegationFailed) as info:
            await send(peers, "hostile.cap")
        assert info.value.code == "no_capable_peer"
    finally:
        await peers.aclose()


async def test_a_registry_entry_that_rebinds_to_metadata_is_refused_at_connect(
    registry: LiveRegistry, http: aiohttp.ClientSession, listener: Listener,
) -> None:
    url = f"http://flip.test:{listener.port}"
    async with http.put(f"{registry.url}/v1/agents/flip", json={
            "card": make_card("Flip", caps=("flip.cap",)), "url": url, "ttl_seconds": 60},
            headers={"Authorization": f"Bearer {TOKENS['alice']}"}) as resp:
        assert resp.status == 201
    names = HostileNames({"flip.test": ["93.184.216.34"]})
    rules = OutboundRules()  # the registry's strictest rules
    discovery = RegistryDiscovery(RegistryClient(registry.url, TOKENS["root"], session=http),
                                  self_name="home", peer_token=SECRET, static=(),
                                  guard=lenient(names, rules), cache_seconds=600,
                                  trusted_registrants=("alice",))
    assert [c.name for c in await discovery(["flip.cap"])] == ["flip"]  # cached from now
    names.names["flip.test"] = ("169.254.169.254",)
    peers = delegator(names, discover=discovery)
    try:
        with pytest.raises(DelegationFailed) as info:
            await send(peers, "flip.cap")
        assert_refused(info.value, url)
        assert "169.254.169.254" in info.value.message
    finally:
        await peers.aclose()


# -- agent cards ---------------------------------------------------------------------------

async def test_card_fetches_are_refused(listener: Listener) -> None:
    guard = lenient(HostileNames())
    async with outbound_session(guard) as session:
        for url in hostile_urls(listener.port):
            client = A2AClient(url, SECRET, session=session, guard=guard, timeout=2,
                               connect_timeout=1)
            with pytest.raises(DelegationFailed) as info:
                await client.card(time.monotonic() + 5)
            assert_refused(info.value, url)


async def test_interface_urls_a_card_advertises_are_refused(listener: Listener) -> None:
    advertised = {"url": ""}

    async def card(request: web.Request) -> web.Response:
        return web.json_response({"name": "x", "capabilities": {}, "supportedInterfaces": [{
            "url": advertised["url"], "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]})

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    guard = lenient(HostileNames())
    try:
        async with outbound_session(guard) as session:
            client = A2AClient(base, SECRET, session=session, guard=guard, timeout=2)
            for url in hostile_urls(listener.port):
                advertised["url"] = url
                with pytest.raises(DelegationFailed) as info:
                    await client.run(TaskRequest(text="x"), chain=("home",), budget=None,
                                     deadline=time.monotonic() + 5)
                assert_refused(info.value, url)
    finally:
        await runner.cleanup()


# -- who gets a token ------------------------------------------------------------------------

async def test_tokens_go_only_where_the_config_sends_them(
    registry: LiveRegistry, http: aiohttp.ClientSession, listener: Listener,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A registrant nobody trusts gets no ``peer_token``, and one that registers under a
    configured peer's name with its own URL gets neither that peer's token nor a call."""
    card = make_card("Grab", caps=("grab.cap",))
    for name in ("stranger", "office"):
        async with http.put(f"{registry.url}/v1/agents/{name}", json={
                "card": card, "url": f"http://127.0.0.1:{listener.port}", "ttl_seconds": 60},
                headers={"Authorization": f"Bearer {TOKENS['alice']}"}) as resp:
            assert resp.status == 201
    office = PeerConfig(name="office", url="http://127.0.0.1:9", token=SECRET,
                        capabilities=("grab.cap",))
    client = RegistryClient(registry.url, TOKENS["root"], session=http)
    untrusting = RegistryDiscovery(client, self_name="home", peer_token=SECRET,
                                   static=(office,), guard=lenient(HostileNames()),
                                   cache_seconds=0)
    with caplog.at_level(logging.INFO, logger="butler.delegation"):
        assert await untrusting(["grab.cap"]) == []
    assert "not in configurations.registry.trusted_registrants" in caplog.text
    assert "not the one configured for peer office" in caplog.text
    trusting = RegistryDiscovery(client, self_name="home", peer_token="shared",
                                 static=(office,), guard=lenient(HostileNames()),
                                 cache_seconds=0, trusted_registrants=("ALICE",))
    found = await trusting(["grab.cap"])
    assert [(c.name, c.token) for c in found] == [("stranger", "shared")]
    assert SECRET not in caplog.text
