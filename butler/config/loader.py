"""YAML -> ``Config``, validating every key; the first problem stops loading."""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import ssl
from collections.abc import Mapping
from pathlib import Path

from butler.config import model as m
from butler.config.a2a_standard import push_notifications
from butler.config.common import ident, url
from butler.config.hosted import parse_hosted_list, parse_hosting
from butler.config.node import Node, read_config_file, yaml_root
from butler.config.operations import (
    parse_audit,
    parse_limits,
    parse_logging,
    parse_metrics,
    parse_rate_limits,
    parse_tasks,
    parse_telemetry,
)
from butler.config.planner import parse_planner
from butler.config.sections import (
    check_registrable,
    limits_by_identity,
    parse_registry,
    parse_swarm,
    parse_token_entry,
    unique,
)
from butler.config.skills_peers import parse_peer, parse_skill


def load_config(path: str | Path, env: Mapping[str, str] | None = None, *,
                secrets: bool = True) -> m.Config:
    """``secrets=False``: for commands that only read the data folder (``butler audit``,
    ``butler spend``); peers' and the registry's tokens are not read, so their variables
    need not be set, and each such token is ``UNREAD_SECRET``."""
    file = str(path)
    text = read_config_file(path)
    return parse_config(text, file=file, env=env, base_dir=Path(path).resolve().parent,
                        secrets=secrets)


def parse_config(
    text: str,
    *,
    file: str = "<config>",
    env: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
    secrets: bool = True,
) -> m.Config:
    root = yaml_root(text, file, env, secrets)
    top = root.mapping({
        "agent", "data_dir", "configurations", "server", "skills", "peers", "tasks",
        "audit", "telemetry", "logging", "rate_limits", "metrics", "planner", "agents",
        "hosting",
    })
    base = base_dir or Path.cwd()
    agent = _agent(top.get("agent"))
    confs = top["configurations"].mapping({"a2a", "swarm", "registry", "mcp_server"}) \
        if "configurations" in top else {}
    data_dir = Path(top["data_dir"].string()) if "data_dir" in top \
        else default_data_dir(agent.id, os.environ if env is None else env)
    skills = tuple(parse_skill(n, base) for n in top["skills"].items()) if "skills" in top else ()
    unique(top.get("skills"), [s.id for s in skills], "skill id")
    peers = tuple(parse_peer(n, base) for n in top["peers"].items()) if "peers" in top else ()
    unique(top.get("peers"), [p.name for p in peers], "peer name")
    registry = parse_registry(confs.get("registry"), base)
    planner = parse_planner(top.get("planner"), base)
    if planner is None:
        for node, cfg in zip(top["skills"].items() if "skills" in top else (), skills,
                             strict=True):
            if cfg.builtin == "planner":
                node.fail("the planner skill needs a planner: section (its endpoint)")
    if registry.self_register and registry.url:
        check_registrable(top.get("agent"), confs.get("registry"), agent.id, registry)
    return m.Config(
        source=file,
        agent=agent,
        data_dir=data_dir if data_dir.is_absolute() else base / data_dir,
        a2a=_a2a(confs.get("a2a")),
        swarm=parse_swarm(confs.get("swarm")),
        registry=registry,
        mcp_server=_mcp(confs.get("mcp_server")),
        limits=parse_limits(top.get("server")),
        tasks=parse_tasks(top.get("tasks")),
        audit=parse_audit(top.get("audit")),
        telemetry=parse_telemetry(top.get("telemetry")),
        logging=parse_logging(top.get("logging")),
        rate_limits=parse_rate_limits(top.get("rate_limits")),
        metrics=parse_metrics(top.get("metrics")),
        skills=skills,
        peers=peers,
        planner=planner,
        agents=parse_hosted_list(top.get("agents"), base, top_id=agent.id,
                                 planner=planner is not None),
        hosting=parse_hosting(top.get("hosting")),
        secret_env=frozenset(root.secret_vars),
    )


def default_data_dir(agent_id: str, env: Mapping[str, str]) -> Path:
    """Under systemd's ``StateDirectory=`` (deploy/butler.service) the state folder it made
    (the first, when it names several); else ``data/<agent id>`` beside the config, since
    the config's own folder may be read-only for the service."""
    state = env.get("STATE_DIRECTORY", "").split(":")[0]
    return Path(state) if state else Path("data") / agent_id


def _agent(node: Node | None) -> m.AgentConfig:
    d = m.AgentConfig()
    if node is None:
        return d
    k = node.mapping({"id", "name", "description", "url", "version"})
    return m.AgentConfig(
        id=ident(k["id"]) if "id" in k else d.id,
        name=k["name"].string(max_len=200) if "name" in k else d.name,
        description=k["description"].string(allow_empty=True) if "description" in k
        else d.description,
        url=url(k["url"]) if "url" in k else d.url,
        version=k["version"].string(max_len=64) if "version" in k else d.version,
    )


def _a2a(node: Node | None) -> m.A2AConfig:
    d = m.A2AConfig()
    if node is None:
        return d
    k = node.mapping({"enabled", "port", "bind_address", "grpc_port", "token_hashes", "tls",
                      "legacy_v03_card", "push_notifications", "anonymous"})
    bind = k["bind_address"].string() if "bind_address" in k else d.bind_address
    if "bind_address" in k:
        try:
            ipaddress.ip_address(bind)
        except ValueError:
            if bind != "localhost":
                k["bind_address"].fail(f"expected an IP address, got {bind!r}")
    token_nodes = list(k["token_hashes"].items()) if "token_hashes" in k else []
    tokens = tuple(parse_token_entry(n, with_limits=True) for n in token_nodes)
    unique(k.get("token_hashes"), [t.digest.hex() for t in tokens], "token hash")
    return m.A2AConfig(
        enabled=k["enabled"].boolean() if "enabled" in k else d.enabled,
        port=k["port"].integer(minimum=0, maximum=65535) if "port" in k else d.port,
        bind_address=bind,
        grpc_port=_grpc_port(k.get("grpc_port")),
        tokens=tokens,
        caller_limits=limits_by_identity(token_nodes, tokens),
        tls=_tls(k.get("tls")),
        legacy_v03_card=k["legacy_v03_card"].boolean() if "legacy_v03_card" in k
        else d.legacy_v03_card,
        push_notifications=push_notifications(k.get("push_notifications")),
        anonymous_tier=_anonymous(k.get("anonymous"), bind),
    )


def _grpc_port(node: Node | None) -> int | None:
    """The A2A gRPC binding, beside the HTTP port on the same address (docs/protocol.md)."""
    if node is None or node.value is None:
        return None
    port = node.integer(minimum=0, maximum=65535)
    # An optional extra: only a config that serves gRPC needs it installed.
    if any(importlib.util.find_spec(name) is None for name in ("grpc", "a2a")):
        node.fail("the gRPC binding needs the grpc extra: pip install 'butler-a2a[grpc]'")
    return port


def _anonymous(node: Node | None, bind: str) -> str | None:
    """``anonymous: {enabled, tier}``: calls without a token, for local inspectors and test
    kits that cannot send one. Refused unless the daemon listens on loopback only."""
    if node is None or node.value is None:
        return None
    k = node.mapping({"enabled", "tier"})
    if not (k["enabled"].boolean() if "enabled" in k else False):
        return None
    if not is_loopback(bind):
        node.fail(f"anonymous callers are allowed only when bind_address is a loopback "
                  f"address (127.0.0.1, ::1, localhost), not {bind!r}")
    return ident(k["tier"]) if "tier" in k else "anonymous"


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _tls(node: Node | None) -> m.TlsConfig | None:
    """HTTPS served directly: both files must exist and load as a certificate chain."""
    if node is None or node.value is None:
        return None
    k = node.mapping({"cert_file", "key_file"})
    for key in ("cert_file", "key_file"):
        if key not in k:
            node.fail(f"tls needs {key}")
    cert, key_file = Path(k["cert_file"].string()), Path(k["key_file"].string())
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key_file)
    except (OSError, ssl.SSLError, ValueError) as exc:
        node.fail(f"cannot load the certificate and key: {exc}")
    return m.TlsConfig(cert_file=cert, key_file=key_file)


def _mcp(node: Node | None) -> m.McpServerConfig:
    if node is None:
        return m.McpServerConfig()
    k = node.mapping({"allowed_capabilities"})
    if "allowed_capabilities" not in k:
        return m.McpServerConfig()
    return m.McpServerConfig(allowed_capabilities=k["allowed_capabilities"].strings())


