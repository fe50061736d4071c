"""Helpers for tests: real daemons on 127.0.0.1 port 0 with real SQLite files."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from butler.config import Config, load_config
from butler.daemon import Daemon
from internal.protocol.a2a.auth import hash_token
from internal.protocol.a2a.client import PeerClient

ECHO = {"id": "echo", "builtin": "echo", "capabilities": ["echo"], "expose": True}


def new_pair() -> tuple[str, str]:
    token = secrets.token_hex(32)
    return token, hash_token(token)


@dataclass
class Instance:
    """A running daemon plus the tokens that may call it."""

    daemon: Daemon
    tokens: dict[str, str]  # identity name -> token
    config_path: Path
    session: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return self.daemon.url

    @property
    def agent_id(self) -> str:
        return self.daemon.config.agent.id

    def client(self, who: str = "operator") -> PeerClient:
        return PeerClient(self.url, self.tokens[who], session=self.session, name=self.agent_id)

    def headers(self, who: str = "operator") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


def config_dict(
    tmp: Path, agent_id: str, *, callers: dict[str, dict[str, Any]] | None = None,
    skills: list[dict[str, Any]] | None = None, peers: list[dict[str, Any]] | None = None,
    swarm: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """A config for ``agent_id``; ``callers`` maps identity -> {tier, bound} options.

    Returns the config and the plain tokens of each caller identity.
    """
    callers = callers if callers is not None else {"operator": {}}
    tokens: dict[str, str] = {}
    hashes = []
    for name, opts in callers.items():
        token, digest = new_pair()
        tokens[name] = token
        entry: dict[str, Any] = {"sha256": digest}
        if opts.get("bound", True):
            entry["name"] = name
        if "tier" in opts:
            entry["tier"] = opts["tier"]
        hashes.append(entry if len(entry) > 1 else digest)
    cfg: dict[str, Any] = {
        "agent": {"id": agent_id, "name": f"{agent_id} butler"},
        "data_dir": str(tmp / agent_id),
        "configurations": {
            "a2a": {"enabled": True, "port": 0, "bind_address": "127.0.0.1",
                    "token_hashes": hashes},
            "swarm": {"enabled": True, "max_depth": 4, "budget_usd": "5.00", **(swarm or {})},
        },
        "skills": skills if skills is not None else [ECHO],
        "peers": peers or [],
    }
    for key, value in (extra or {}).items():
        cfg[key] = value
    return cfg, tokens


def write_config(tmp: Path, name: str, cfg: dict[str, Any]) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


async def start_instance(
    tmp: Path, session: aiohttp.ClientSession, cfg: dict[str, Any], tokens: dict[str, str],
    **daemon_kwargs: Any,
) -> Instance:
    from butler.delegation.wiring import make_delegator

    path = write_config(tmp, cfg["agent"]["id"], cfg)
    config: Config = load_config(path)
    daemon_kwargs.setdefault("delegator_factory", make_delegator)
    daemon = Daemon(config, **daemon_kwargs)
    await daemon.start()
    return Instance(daemon, tokens, path, session)


@dataclass
class Swarm:
    """Several instances; stopped in reverse order at teardown."""

    tmp: Path
    session: aiohttp.ClientSession
    instances: list[Instance] = field(default_factory=list)

    async def start(self, agent_id: str, **kwargs: Any) -> Instance:
        daemon_kwargs = kwargs.pop("daemon_kwargs", {})
        cfg, tokens = config_dict(self.tmp, agent_id, **kwargs)
        inst = await start_instance(self.tmp, self.session, cfg, tokens, **daemon_kwargs)
        self.instances.append(inst)
        return inst

    async def stop(self, inst: Instance) -> None:
        await inst.daemon.stop()
        self.instances.remove(inst)

    async def close(self) -> None:
        for inst in reversed(self.instances):
            await inst.daemon.stop()
        self.instances.clear()
