"""Building several Butlers that know each other: ports, tokens and peers up front."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from butler.delegation.delegator import PeerDelegator
from tests.support import ECHO, Instance, Swarm, config_dict, start_instance


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def skill(capability: str, cost: str = "0", **extra: Any) -> dict[str, Any]:
    return {"id": capability, "builtin": "echo", "capabilities": [capability],
            "cost_usd": cost, "expose": True, **extra}


class Mesh:
    """Declare agents, their skills and who may call whom, then start them all."""

    def __init__(self, tmp: Path, session: aiohttp.ClientSession) -> None:
        self.tmp = tmp
        self.session = session
        self.specs: dict[str, dict[str, Any]] = {}
        self.instances: dict[str, Instance] = {}

    def agent(self, agent_id: str, *, skills: list[dict[str, Any]] | None = None,
              swarm: dict[str, Any] | None = None, daemon_kwargs: dict[str, Any] | None = None,
              configurations: dict[str, dict[str, Any]] | None = None,
              callers: dict[str, dict[str, Any]] | None = None,
              accept: list[str] | None = None, extra: dict[str, Any] | None = None) -> None:
        """``accept``: extra token hashes (unbound) this agent accepts; ``extra``: more
        top-level config sections (``planner``)."""
        self.specs[agent_id] = {"skills": skills if skills is not None else [ECHO],
                                "swarm": swarm or {}, "peers": [], "port": free_port(),
                                "callers": {"operator": {"bound": False}, **(callers or {})},
                                "daemon_kwargs": daemon_kwargs or {},
                                "configurations": configurations or {},
                                "accept": accept or [], "extra": extra or {}}

    def url(self, agent_id: str) -> str:
        return f"http://127.0.0.1:{self.specs[agent_id]['port']}"

    def link(self, caller: str, callee: str, capabilities: list[str], *, name: str | None = None,
             url: str | None = None, **peer: Any) -> None:
        """``caller`` may delegate ``capabilities`` to ``callee`` (peer entry ``name``)."""
        self.specs[callee]["callers"][caller] = {}
        self.specs[caller]["peers"].append({
            "name": name or callee, "url": url or self.url(callee), "capabilities": capabilities,
            "_token_of": (callee, caller), **peer})

    def tokens(self, agent_id: str) -> dict[str, str]:
        return self.instances[agent_id].tokens

    async def start(self) -> dict[str, Instance]:
        built: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}
        for agent_id, spec in self.specs.items():
            cfg, tokens = config_dict(self.tmp, agent_id, callers=spec["callers"],
                                      skills=spec["skills"], swarm=spec["swarm"],
                                      configurations=spec["configurations"],
                                      extra=spec["extra"])
            cfg["configurations"]["a2a"]["port"] = spec["port"]
            cfg["configurations"]["a2a"]["token_hashes"] += spec["accept"]
            built[agent_id] = (cfg, tokens)
        for agent_id, (cfg, _) in built.items():
            peers = []
            for peer in self.specs[agent_id]["peers"]:
                peer = dict(peer)
                callee, caller = peer.pop("_token_of")
                token_file = self.tmp / f"{caller}-to-{callee}-{peer['name']}.token"
                token_file.write_text(built[callee][1][caller])
                peer["token_file"] = str(token_file)
                peers.append(peer)
            cfg["peers"] = peers
        for agent_id, (cfg, tokens) in built.items():
            self.instances[agent_id] = await start_instance(
                self.tmp, self.session, cfg, tokens, **self.specs[agent_id]["daemon_kwargs"])
        return self.instances

    async def close(self) -> None:
        for inst in reversed(list(self.instances.values())):
            await inst.daemon.stop()
        self.instances.clear()


def following(inst: Instance) -> list[str]:
    """The ids of the peers' tasks its delegations follow now."""
    delegator = inst.daemon.engine.delegator
    assert isinstance(delegator, PeerDelegator)
    return [f.update.ref.task_id for f in delegator.cancels.followed
            if f.running and f.update is not None]


async def butler_with_peer(swarm: Swarm, url: str, token: str, *,
                           configurations: dict[str, dict[str, Any]] | None = None,
                           **peer: Any) -> Instance:
    """``configurations``: sections (or keys of one) of home's own config."""
    token_file = swarm.tmp / "peer.token"
    token_file.write_text(token)
    cfg, tokens = config_dict(swarm.tmp, "home", configurations=configurations, peers=[{
        "name": "shouter", "url": url, "token_file": str(token_file), "protocol": "a2a",
        "capabilities": ["shout"], **peer}])
    inst = await start_instance(swarm.tmp, swarm.session, cfg, tokens)
    swarm.instances.append(inst)
    return inst


def a2a_card(url: str, binding: str = "JSONRPC", *, streaming: bool = False) -> dict[str, Any]:
    """An A2A 1.0 card naming one interface: what a fake standard agent serves."""
    return {"name": "fake", "description": "fake", "version": "1",
            "supportedInterfaces": [{"url": url, "protocolBinding": binding,
                                     "protocolVersion": "1.0"}],
            "capabilities": {"streaming": streaming}, "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"], "skills": []}


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """``app`` on 127.0.0.1 port 0: its base URL, until the block ends."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
