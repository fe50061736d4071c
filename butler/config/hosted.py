"""``agents:``: the other agents one daemon serves under ``/{id}/`` (docs/hosting.md).

An entry is read by the same section parsers as the daemon's own agent (skills, peers,
token hashes with their limits, swarm, registry); ``hosted_config`` then makes the whole
``Config`` of that agent from the daemon's, so each hosted agent is assembled by the same
``Daemon`` code as the top one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from butler.config import model as m
from butler.config.node import Node, yaml_root
from butler.config.sections import (
    check_registrable,
    limits_by_identity,
    parse_registry,
    parse_swarm,
    parse_token_entry,
    unique,
)
from butler.config.skills_peers import parse_peer, parse_skill
from internal.protocol.a2a.codec import exact_json

# A path segment as it is, with no escaping: lowercase letters, digits, _ and -.
AGENT_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# The first path segments of the daemon's own routes (the /mcp endpoint's too, served or
# not), so a hosted agent's id never depends on what else is configured.
RESERVED_IDS = frozenset({"v2", "a2a", "tasks", "dashboard", "healthz", "metrics", "mcp"})
HOSTED_FOLDER = "agents"  # <data_dir>/agents/<id>/: each hosted agent's own data folder
_KEYS = {"id", "name", "description", "version", "token_hashes", "skills", "peers", "swarm",
         "registry"}


def parse_hosted(node: Node, base: Path, *, planner: bool) -> m.HostedAgentConfig:
    """One entry of ``agents:``; ``planner``: whether the daemon has a ``planner:``."""
    k = node.mapping(_KEYS)
    if "id" not in k:
        node.fail("a hosted agent needs an id (its URL path segment)")
    agent_id = k["id"].string(max_len=64)
    if not AGENT_ID.fullmatch(agent_id):
        k["id"].fail("must be 1-64 lowercase letters, digits, _ and - (it is a URL path "
                     "segment), starting with a letter or digit")
    if agent_id in RESERVED_IDS:
        k["id"].fail(f"{agent_id!r} is a path of the daemon's own "
                     f"({', '.join(sorted(RESERVED_IDS))} are taken)")
    if "token_hashes" not in k:
        node.fail("a hosted agent needs token_hashes: no one could call it otherwise")
    token_nodes = list(k["token_hashes"].items())
    if not token_nodes:
        k["token_hashes"].fail("needs at least one token hash: no one could call it otherwise")
    tokens = tuple(parse_token_entry(n, with_limits=True) for n in token_nodes)
    unique(k["token_hashes"], [t.digest.hex() for t in tokens], "token hash")
    skills = tuple(parse_skill(n, base) for n in k["skills"].items()) if "skills" in k else ()
    unique(k.get("skills"), [s.id for s in skills], "skill id")
    if not planner:
        for skill_node, skill in zip(k["skills"].items() if "skills" in k else (), skills,
                                     strict=True):
            if skill.builtin == "planner":
                skill_node.fail("the planner skill needs the daemon's planner: section")
    peers = tuple(parse_peer(n, base) for n in k["peers"].items()) if "peers" in k else ()
    unique(k.get("peers"), [p.name for p in peers], "peer name")
    registry = parse_registry(k["registry"], base) if "registry" in k else None
    if registry is not None and registry.self_register and registry.url:
        check_registrable(node, k["registry"], agent_id, registry)
    return m.HostedAgentConfig(
        id=agent_id,
        name=k["name"].string(max_len=200) if "name" in k else agent_id,
        description=k["description"].string(allow_empty=True) if "description" in k else "",
        version=k["version"].string(max_len=64) if "version" in k else "0.1.0",
        tokens=tokens,
        caller_limits=limits_by_identity(token_nodes, tokens),
        skills=skills,
        peers=peers,
        swarm=parse_swarm(k["swarm"]) if "swarm" in k else None,
        registry=registry,
    )


def parse_hosted_list(node: Node | None, base: Path, *, top_id: str,
                      planner: bool) -> tuple[m.HostedAgentConfig, ...]:
    if node is None:
        return ()
    agents = tuple(parse_hosted(n, base, planner=planner) for n in node.items())
    unique(node, [a.id for a in agents], "hosted agent id")
    for entry, agent in zip(node.items(), agents, strict=True):
        if agent.id == top_id:
            entry.fail(f"{agent.id!r} is the daemon's own agent.id")
    return agents


def parse_hosting(node: Node | None) -> m.HostingConfig:
    if node is None:
        return m.HostingConfig()
    d = m.HostingConfig()
    k = node.mapping({"allow_local_access", "max_agents"})
    return m.HostingConfig(
        allow_local_access=k["allow_local_access"].boolean() if "allow_local_access" in k
        else d.allow_local_access,
        max_agents=k["max_agents"].integer(minimum=0, maximum=1000) if "max_agents" in k
        else d.max_agents)


def parse_hosted_json(entry: Mapping[str, Any], parent: m.Config) -> m.HostedAgentConfig:
    """An entry sent to the admin API (or kept in the data folder), in the config's shape;
    its errors name the key as the config's do. Unless ``hosting.allow_local_access``,
    it is held to what an admin token may ask of the machine: nothing."""
    local = parent.hosting.allow_local_access
    # No ${VAR} either (an unset variable is an error): a variable's value on a card
    # would be read by anyone.
    root = yaml_root(exact_json.dumps(entry), "<hosted agent>", None if local else {}, True)
    if not isinstance(root.value, dict):
        root.fail("a hosted agent is an object")
    if not local:
        _no_local_access(root)
    base = Path(parent.source).resolve().parent if parent.source != "<config>" else Path.cwd()
    agent = parse_hosted(root, base, planner=parent.planner is not None)
    if agent.id == parent.agent.id:
        root.fail(f"{agent.id!r} is the daemon's own agent.id")
    if not local:
        # It is announced as the daemon's agents are, but never given the registry's
        # peer_token: callers the admin chose would otherwise delegate with the
        # operator's token to whatever the registry lists.
        agent = replace(agent, registry=replace(parent.registry, peer_token=""))
    return agent


def hosted_config(parent: m.Config, agent: m.HostedAgentConfig, public_url: str) -> m.Config:
    """The whole config of ``agent``, served at ``public_url`` (the daemon's URL and
    ``/{id}``): its own identity, data folder, callers, skills, peers and limits; the rest
    (limits, timeouts, telemetry, planner) is the daemon's. Never a gRPC port or a separate
    metrics listener: those stay the daemon's own agent's."""
    return replace(
        parent,
        agent=m.AgentConfig(id=agent.id, name=agent.name, description=agent.description,
                            url=public_url, version=agent.version),
        data_dir=parent.data_dir / HOSTED_FOLDER / agent.id,
        a2a=replace(parent.a2a, tokens=agent.tokens, caller_limits=agent.caller_limits,
                    grpc_port=None, anonymous_tier=None),
        swarm=agent.swarm or parent.swarm,
        registry=agent.registry or parent.registry,
        skills=agent.skills,
        peers=agent.peers,
        metrics=replace(parent.metrics, listen=""),
        agents=(),
    )


def _no_local_access(root: Node) -> None:
    """Checked before anything is parsed, so no file or variable is read first."""
    entry = root.value
    for key in ("peers", "registry"):
        if key in entry:
            root.fail(f"{key}: an agent added at run time has none (its tokens would be read "
                      "from this machine); set hosting.allow_local_access in the config, or "
                      "add the agent to the config file")
    skills = entry.get("skills")
    for i, skill in enumerate(skills if isinstance(skills, list) else ()):
        if isinstance(skill, dict) and skill.get("builtin") == "planner":
            root.fail(f"skills[{i}]: an agent added at run time has no planner (it would "
                      "spend on the daemon's model key for callers the admin chose); set "
                      "hosting.allow_local_access in the config, or add the agent to the "
                      "config file")
        if not isinstance(skill, dict) or set(skill) & {"command", "python", "mcp"}:
            root.fail(f"skills[{i}]: an agent added at run time has builtin skills only (a "
                      "command, plugin or MCP server would run on this machine); set "
                      "hosting.allow_local_access in the config, or add the agent to the "
                      "config file")
