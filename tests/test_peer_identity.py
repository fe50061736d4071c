"""Key continuity between peers: a caller pins a peer's key on first contact and sends
its token only while the peer's card is signed by that key or one it rotated to."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import aiohttp
import pytest

from butler.config import load_config
from butler.daemon import Daemon
from butler.delegation.peer_identity import PINS_FILE
from butler.delegation.wiring import make_delegator
from butler.identity.key_file import KEY_FILE, load_identity
from internal.protocol.a2a.model import WELL_KNOWN_CARD_PATH, TaskRequest, TaskState
from internal.protocol.a2a.server._card_route import CardRoute
from internal.signing import IdentityKey
from tests.delegation_support import Mesh, free_port, skill
from tests.support import Instance, run_cli


async def restart(inst: Instance) -> Daemon:
    """The same peer, on the same port and data folder, as a new process would be."""
    await inst.daemon.stop()
    daemon = Daemon(load_config(inst.config_path), delegator_factory=make_delegator)
    await daemon.start()
    return daemon


async def delegate(home: Instance) -> tuple[TaskState, str]:
    task = await home.client().submit(TaskRequest(text="t", capabilities_needed=("x.work",)))
    return task.state, task.error.code if task.error else ""


async def refusal(home: Instance) -> str:
    task = await home.client().submit(TaskRequest(text="t", capabilities_needed=("x.work",)))
    assert task.error is not None and task.error.code == "peer_identity_changed"
    return task.error.message


async def office_task_count(mesh: Mesh, url: str, office: Instance) -> int:
    async with mesh.session.get(f"{url}/v2/tasks", headers=office.headers("home")) as resp:
        return len((await resp.json())["tasks"])


async def home_and_office(mesh: Mesh) -> tuple[Instance, Instance]:
    """Home delegates to office once: office's key is pinned."""
    mesh.agent("home", skills=[])
    mesh.agent("office", skills=[skill("x.work")])
    mesh.link("home", "office", ["x.work"])
    agents = await mesh.start()
    assert await delegate(agents["home"]) == (TaskState.COMPLETED, "")
    return agents["home"], agents["office"]


async def test_a_peer_that_swaps_its_key_is_refused(mesh: Mesh) -> None:
    home, office = await home_and_office(mesh)
    pins = json.loads((home.daemon.config.data_dir / PINS_FILE).read_text())
    assert pins["office"]["kid"] == office.daemon.identity.kid
    # The office loses its key (a new machine, or an impostor at its address).
    (office.daemon.config.data_dir / KEY_FILE).unlink()
    swapped = await restart(office)
    try:
        assert swapped.identity.kid != pins["office"]["kid"]
        state, code = await delegate(home)
        assert (state, code) == (TaskState.FAILED, "peer_identity_changed")
        # Refused before the token went: the office saw no second task.
        assert await office_task_count(mesh, swapped.url, office) == 1
    finally:
        await swapped.stop()
        office.daemon = swapped  # stopped: the mesh's teardown stops it once more, harmlessly


def card_reads(daemon: Daemon) -> float:
    return float(daemon.metrics.requests.value(f"GET {WELL_KNOWN_CARD_PATH}", "200"))


async def test_the_card_is_checked_per_new_connection_not_per_call(mesh: Mesh) -> None:
    home, office = await home_and_office(mesh)
    first = card_reads(office.daemon)
    assert first == 1
    for _ in range(3):
        assert await delegate(home) == (TaskState.COMPLETED, "")
    assert card_reads(office.daemon) == first  # the kept-alive connection: no card read
    # The same office restarted: its connections are gone, and the next call's new one
    # waits for the card's check.
    office.daemon = await restart(office)
    assert await delegate(home) == (TaskState.COMPLETED, "")
    assert card_reads(office.daemon) == 1


class Relay:
    """A TCP proxy that keeps its client's connection while the server behind it
    restarts, as a reverse proxy's keep-alive does: a client's bytes go to a backend
    connection, opened anew once the last one closed."""

    def __init__(self, backend_port: int) -> None:
        self.port = free_port()
        self.backend_port = backend_port
        self.tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Relay:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        current = asyncio.current_task()
        assert current is not None
        self.tasks.add(current)
        backend: asyncio.StreamWriter | None = None
        pump: asyncio.Task[None] | None = None
        try:
            while data := await reader.read(65536):
                if backend is None or pump is None or pump.done():
                    if backend is not None:
                        backend.close()
                    from_backend, backend = await asyncio.open_connection(
                        "127.0.0.1", self.backend_port)
                    pump = asyncio.create_task(self._pump(from_backend, writer))
                    self.tasks.add(pump)
                backend.write(data)
        finally:
            writer.close()
            if backend is not None:
                backend.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)


async def test_behind_a_proxy_that_keeps_the_connection_a_swapped_key_gets_one_call(
        mesh: Mesh) -> None:
    """What the check per new connection cannot see: the agent behind a proxy replaced
    while the proxy keeps our connection. That call's token reaches the new agent; its
    answer's receipt is refused, and from then on the card is checked before every call
    until one succeeds, so the next call is refused before its token is sent."""
    mesh.agent("home", skills=[])
    mesh.agent("office", skills=[skill("x.work")])
    async with Relay(mesh.specs["office"]["port"]) as relay:
        mesh.link("home", "office", ["x.work"], url=f"http://127.0.0.1:{relay.port}")
        agents = await mesh.start()
        home, office = agents["home"], agents["office"]
        assert await delegate(home) == (TaskState.COMPLETED, "")
        (office.daemon.config.data_dir / KEY_FILE).unlink()
        swapped = await restart(office)
        try:
            assert "the token went with that call" in await refusal(home)
            assert await office_task_count(mesh, swapped.url, office) == 2
            assert "no token was sent" in await refusal(home)
            assert await office_task_count(mesh, swapped.url, office) == 2
        finally:
            await swapped.stop()
            office.daemon = swapped
            await mesh.close()


async def test_an_impostor_replaying_the_card_is_caught_by_its_receipt(
        mesh: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    """A signed card is public: whoever took the peer's address can serve it. The check
    before the token cannot tell; the answer's receipt, which needs the key, does."""
    home, office = await home_and_office(mesh)
    async with mesh.session.get(f"{office.url}/.well-known/agent-card.json") as resp:
        replayed = await resp.json()
    (office.daemon.config.data_dir / KEY_FILE).unlink()
    impostor = await restart(office)
    monkeypatch.setattr(CardRoute, "_negotiated", lambda self, info, version: replayed)
    try:
        assert impostor.identity.kid != office.daemon.identity.kid
        assert await delegate(home) == (TaskState.FAILED, "peer_identity_changed")
    finally:
        await impostor.stop()
        office.daemon = impostor


async def test_a_rotated_key_is_followed_end_to_end(mesh: Mesh) -> None:
    home, office = await home_and_office(mesh)
    old_kid = office.daemon.identity.kid
    await office.daemon.stop()
    code, out, err = await run_cli("key", "rotate", "-c", str(office.config_path))
    assert code == 0, err
    daemon = Daemon(load_config(office.config_path), delegator_factory=make_delegator)
    await daemon.start()
    office.daemon = daemon
    assert daemon.identity.kid != old_kid
    assert await delegate(home) == (TaskState.COMPLETED, "")
    pins = json.loads((home.daemon.config.data_dir / PINS_FILE).read_text())
    assert pins["office"]["kid"] == daemon.identity.kid
    # The receipts of the new task verify against the card with the rotated key.
    task = await home.client().submit(TaskRequest(text="t", capabilities_needed=("x.work",)))
    code, out, err = await run_cli("receipt", "verify", home.url, task.id,
                                   token=home.tokens["operator"])
    assert code == 0, err
    assert f"key {daemon.identity.kid}" in out


async def test_a_peer_found_in_a_registry_is_held_to_the_key_registered_for_it(
        tmp_path: Path, http: aiohttp.ClientSession) -> None:
    """No earlier contact: the registry's key is the pin. An entry naming another key than
    the one the agent at that URL signs with gets no token."""
    from tests.registry.registry_support import TOKENS, sqlite_registry
    from tests.test_registry_swarm import registry_files

    async with sqlite_registry(tmp_path / "registry") as registry:
        reg_conf, accept = registry_files(tmp_path, registry, ["alice"])
        mesh = Mesh(tmp_path, http)
        mesh.agent("home", skills=[], configurations=reg_conf("root", False), accept=accept)
        mesh.agent("office", skills=[skill("x.work")], configurations=reg_conf("alice", False),
                   accept=accept)
        try:
            agents = await mesh.start()
            office = agents["office"]
            async with http.get(office.url + "/v2/card", headers=office.headers()) as resp:
                card = await resp.json()
            stranger = load_identity(tmp_path / "stranger")

            async def register(identity_key: dict[str, str]) -> None:
                async with http.put(f"{registry.url}/v1/agents/office", headers={
                        "Authorization": f"Bearer {TOKENS['alice']}"}, json={
                        "card": {**card, "identity_key": identity_key}}) as resp:
                    assert resp.status in (200, 201), await resp.text()

            await register(stranger.key.public.jwk)
            assert await delegate(agents["home"]) == (TaskState.FAILED, "peer_identity_changed")
            assert not (agents["home"].daemon.config.data_dir / PINS_FILE).exists()
            await http.delete(f"{registry.url}/v1/agents/office",
                              headers={"Authorization": f"Bearer {TOKENS['alice']}"})
            await register(card["identity_key"])
            assert await delegate(agents["home"]) == (TaskState.COMPLETED, "")
            pins = json.loads((agents["home"].daemon.config.data_dir / PINS_FILE).read_text())
            assert pins["office"]["kid"] == office.daemon.identity.kid
        finally:
            await mesh.close()


async def test_butler_delegate_holds_a_configured_peer_to_its_pinned_key(mesh: Mesh) -> None:
    """The command line sends the daemon's token as the daemon would: only to a peer whose
    card its pinned key signed (issue 39: `butler delegate` once skipped the pin)."""
    mesh.agent("home", skills=[])
    mesh.agent("office", skills=[skill("x.work")])
    mesh.link("home", "office", ["x.work"])
    agents = await mesh.start()
    config = str(agents["home"].config_path)
    code, _, err = await run_cli("delegate", "-c", config, "--peer", "office",
                                 "--capability", "x.work", "work")
    assert code == 0, err
    pins_file = agents["home"].daemon.config.data_dir / "peer_keys.json"
    pins = json.loads(pins_file.read_text())
    assert pins["office"]["kid"] == load_identity(
        agents["office"].daemon.config.data_dir).kid  # pinned on first contact
    other = IdentityKey.generate().public
    pins["office"] = {"jwk": other.jwk, "kid": other.kid, "pinned_at": "2026-11-28"}
    pins_file.write_text(json.dumps(pins))
    code, _, err = await run_cli("delegate", "-c", config, "--peer", "office",
                                 "--capability", "x.work", "work")
    assert code == 1 and "peer_identity_changed" in err and "no token was sent" in err, err
