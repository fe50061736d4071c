"""Daemons that host several agents: the entries of ``agents:`` and each agent as an
``Instance`` (its URL is the daemon's and ``/{id}``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from butler.daemon import Daemon
from tests.support import ECHO, Instance, new_pair


def hosted_entry(agent_id: str, *, callers: dict[str, dict[str, Any]] | None = None,
                 skills: list[dict[str, Any]] | None = None, **extra: Any,
                 ) -> tuple[dict[str, Any], dict[str, str]]:
    """An ``agents:`` entry and the plain tokens of its callers (``operator`` by default;
    ``{"tier": "admin"}`` and the like as options)."""
    tokens: dict[str, str] = {}
    hashes = []
    for name, opts in (callers or {"operator": {}}).items():
        tokens[name], digest = new_pair()
        hashes.append({"sha256": digest, "name": name, **opts})
    entry = {"id": agent_id, "name": f"{agent_id} agent", "token_hashes": hashes,
             "skills": skills if skills is not None else [ECHO], **extra}
    return entry, tokens


def hosted(top: Instance, agent_id: str, tokens: dict[str, str]) -> Instance:
    """The agent ``agent_id`` that ``top``'s daemon hosts, called with ``tokens``."""
    assert top.daemon.agents is not None
    daemon = top.daemon.agents.running[agent_id].daemon
    assert isinstance(daemon, Daemon)
    return Instance(daemon, tokens, top.config_path, top.session)


def peer_to(tmp: Path, url: str, token: str, name: str, capabilities: list[str],
            **extra: Any) -> dict[str, Any]:
    token_file = tmp / f"to-{name}-{len(list(tmp.glob('to-*')))}.token"
    token_file.write_text(token)
    return {"name": name, "url": url, "token_file": str(token_file),
            "capabilities": capabilities, **extra}


async def get_json(session: aiohttp.ClientSession, url: str, token: str | None = None,
                   headers: dict[str, str] | None = None) -> tuple[int, Any]:
    hdrs = dict(headers or {})
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    async with session.get(url, headers=hdrs) as resp:
        return resp.status, await resp.json(content_type=None)
