"""Three Butlers and a registry: home finds memory.search by capability and delegates."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from pathlib import Path

import aiohttp
import pytest

from internal.http import hash_token
from internal.protocol.a2a.model import TaskRequest, TaskState
from tests.delegation_support import Mesh, skill
from tests.registry.registry_support import TOKENS, LiveRegistry, sqlite_registry


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[LiveRegistry]:
    async with sqlite_registry(tmp_path) as reg:
        yield reg


RegConf = Callable[[str, bool], dict[str, dict[str, object]]]


def registry_files(tmp_path: Path, registry: LiveRegistry,
                   trusted: list[str]) -> tuple[RegConf, list[str]]:
    """The token files, a registry section for an instance registering as ``owner``, and
    the hash each instance accepts from peers found through the registry."""
    swarm_token = "swarm-shared-token-0123456789abcdef"
    (tmp_path / "swarm.token").write_text(swarm_token)
    for name in ("alice", "bob", "root"):
        (tmp_path / f"{name}.token").write_text(TOKENS[name])

    def reg_conf(owner: str, self_register: bool) -> dict[str, dict[str, object]]:
        return {"registry": {"self_register": self_register, "url": registry.url,
                             "token_file": str(tmp_path / f"{owner}.token"),
                             "peer_token_file": str(tmp_path / "swarm.token"),
                             "health_ttl_minutes": 1, "cache_seconds": 0,
                             "trusted_registrants": trusted}}

    return reg_conf, [hash_token(swarm_token)]


async def test_home_finds_memory_search_through_the_registry(
    tmp_path: Path, http: aiohttp.ClientSession, registry: LiveRegistry
) -> None:
    reg_conf, accept = registry_files(tmp_path, registry, ["alice", "bob"])
    mesh = Mesh(tmp_path, http)
    mesh.agent("home", skills=[], configurations=reg_conf("root", False), accept=accept)
    search = {"id": "memory.search", "builtin": "memory.search", "cost_usd": "0.03",
              "expose": True}
    mesh.agent("office", skills=[search], configurations=reg_conf("alice", True), accept=accept)
    mesh.agent("lab", skills=[skill("lab.echo")], configurations=reg_conf("bob", True),
               accept=accept)
    try:
        agents = await mesh.start()
        found = await registry_find(http, registry.url, "memory.search")
        assert found == ["office"]

        task = await agents["home"].client().submit(
            TaskRequest(text="printer", capabilities_needed=("memory.search",)))
        assert task.state is TaskState.COMPLETED, task.error
        assert task.cost is not None and [c.agent for c in task.cost.children] == ["office"]
        assert task.budget is not None and task.budget.spent_usd == Decimal("0.03")

        none = await agents["home"].client().submit(
            TaskRequest(text="x", capabilities_needed=("nobody.has.this",)))
        assert none.error is not None and none.error.code == "no_capable_skill"
    finally:
        await mesh.close()
    assert await registry_find(http, registry.url, "memory.search") == []


async def registry_find(http: aiohttp.ClientSession, url: str, capability: str) -> list[str]:
    async with http.get(f"{url}/v1/agents", params={"capability": capability},
                        headers={"Authorization": f"Bearer {TOKENS['root']}"}) as resp:
        assert resp.status == 200
        return [a["name"] for a in (await resp.json())["agents"]]


async def test_registry_exports_its_size(http: aiohttp.ClientSession,
                                         registry: LiveRegistry) -> None:
    from tests.registry.registry_support import auth, make_card

    for name in ("office", "lab"):
        async with http.put(f"{registry.url}/v1/agents/{name}", headers=auth("alice"),
                            json={"card": make_card(name), "ttl_seconds": 60}) as resp:
            assert resp.status == 201
    async with http.get(f"{registry.url}/metrics") as resp:
        assert resp.status == 401
    async with http.get(f"{registry.url}/metrics", headers=auth("root")) as resp:
        assert resp.status == 200
        assert "butler_registry_agents 2\n" in await resp.text()


@pytest.mark.parametrize(("url", "loopback", "private", "allowed"), [
    ("http://127.0.0.1:8081", True, True, True),
    ("http://127.0.0.1:8081", False, True, False),
    ("http://localhost:8081", False, True, False),  # names are resolved, then checked
    ("http://192.168.1.20:8081", True, True, True),
    ("http://192.168.1.20:8081", True, False, False),
    ("http://10.0.0.5", True, False, False),
    ("http://169.254.169.254/latest", True, True, False),  # cloud metadata: never
    ("http://[fe80::1]:8081", True, True, False),  # link-local: never
    ("ftp://192.168.1.20", True, True, False),
    ("http://user:secret@192.168.1.20", True, True, False),
])
async def test_registry_urls_pass_the_outbound_policy_or_are_ignored(
    url: str, loopback: bool, private: bool, allowed: bool
) -> None:
    from internal.http import OutboundGuard, OutboundRules
    from internal.protocol.a2a.model import OutboundRefused

    guard = OutboundGuard(OutboundRules(allow_loopback=loopback, allow_private=private))
    if allowed:
        await guard.check_url(url)
    else:
        with pytest.raises(OutboundRefused):
            await guard.check_url(url)


async def test_a_registry_entry_failing_the_policy_is_not_a_candidate(
    tmp_path: Path, http: aiohttp.ClientSession, registry: LiveRegistry
) -> None:
    from butler.delegation.discovery import RegistryDiscovery
    from butler.registry.client import RegistryClient
    from internal.http import CONFIGURED, OutboundGuard, OutboundRules
    from tests.registry.registry_support import auth, make_card

    for name, url in (("metadata", "http://169.254.169.254"), ("office", "http://127.0.0.1:9")):
        async with http.put(f"{registry.url}/v1/agents/{name}", headers=auth("alice"), json={
                "card": make_card(name), "url": url, "ttl_seconds": 60}) as resp:
            assert resp.status == 201
    client = RegistryClient(registry.url, TOKENS["root"], session=http)
    discovery = RegistryDiscovery(client, self_name="home", peer_token="t", static=(),
                                  guard=OutboundGuard(CONFIGURED), cache_seconds=0,
                                  trusted_registrants=("alice",))
    assert [c.name for c in await discovery(["memory.search"])] == ["office"]
    strict = RegistryDiscovery(client, self_name="home", peer_token="t", static=(),
                               guard=OutboundGuard(OutboundRules(allow_private=True)),
                               cache_seconds=0, trusted_registrants=("alice",))
    assert await strict(["memory.search"]) == []


async def test_home_routes_plain_words_to_an_agent_it_found_in_the_registry(
    tmp_path: Path, http: aiohttp.ClientSession, registry: LiveRegistry
) -> None:
    """No static peer: the intent router ranks the registry's agents by their cards; an
    agent registered by an identity home does not trust is never a candidate."""
    reg_conf, accept = registry_files(tmp_path, registry, ["alice"])
    mesh = Mesh(tmp_path, http)
    mesh.agent("home", skills=[skill("home.lights", name="Lights")],
               configurations=reg_conf("root", False), accept=accept)
    mesh.agent("office", skills=[skill("office.action_items", "0.02", name="Action items",
                                       tags=["action items", "todo"])],
               configurations=reg_conf("alice", True), accept=accept)
    # bob is not trusted by home: his agent offers the same words and must not get them.
    mesh.agent("lab", skills=[skill("lab.action_items", name="Action items",
                                    tags=["action items", "todo", "pending"])],
               configurations=reg_conf("bob", True), accept=accept)
    try:
        agents = await mesh.start()
        task = await agents["home"].client().submit(
            TaskRequest(text="any pending action items?"))
        assert task.state is TaskState.COMPLETED, task.error
        assert task.cost is not None
        [hop] = task.cost.children
        assert (hop.agent, hop.skill) == ("office", "office.action_items")
        assert task.budget is not None and task.budget.spent_usd == Decimal("0.02")
        lab = await agents["lab"].daemon.engine.store.list_tasks(
            owner=None, state=None, context_id=None, cursor=None, limit=10)
        assert lab.tasks == ()
    finally:
        await mesh.close()
