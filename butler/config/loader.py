"""YAML -> ``Config``, validating every key; the first problem stops loading."""

from __future__ import annotations

import importlib.util
import ipaddress
import re
import ssl
from collections.abc import Mapping
from pathlib import Path

from butler.config import model as m
from butler.config.a2a_standard import push_notifications
from butler.config.caller_limits import parse_caller_limits
from butler.config.common import ident, secret, url
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
from butler.config.skills_peers import parse_peer, parse_skill
from internal.http import TokenEntry
from internal.protocol.a2a.model import Identity

_HEX64 = re.compile(r"[0-9a-f]{64}")


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
        "audit", "telemetry", "logging", "rate_limits", "metrics", "planner",
    })
    base = base_dir or Path.cwd()
    agent = _agent(top.get("agent"))
    confs = top["configurations"].mapping({"a2a", "swarm", "registry", "mcp_server"}) \
        if "configurations" in top else {}
    data_dir = Path(top["data_dir"].string()) if "data_dir" in top else Path("data") / agent.id
    skills = tuple(parse_skill(n, base) for n in top["skills"].items()) if "skills" in top else ()
    _unique(top.get("skills"), [s.id for s in skills], "skill id")
    peers = tuple(parse_peer(n, base) for n in top["peers"].items()) if "peers" in top else ()
    _unique(top.get("peers"), [p.name for p in peers], "peer name")
    registry = _registry(confs.get("registry"), base)
    planner = parse_planner(top.get("planner"), base)
    if planner is None:
        for node, cfg in zip(top["skills"].items() if "skills" in top else (), skills,
                             strict=True):
            if cfg.builtin == "planner":
                node.fail("the planner skill needs a planner: section (its endpoint)")
    if registry.self_register and registry.url:
        _check_registrable(top.get("agent"), confs.get("registry"), agent.id, registry)
    return m.Config(
        source=file,
        agent=agent,
        data_dir=data_dir if data_dir.is_absolute() else base / data_dir,
        a2a=_a2a(confs.get("a2a")),
        swarm=_swarm(confs.get("swarm")),
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
        secret_env=frozenset(root.secret_vars),
    )


def _check_registrable(agent_node: Node | None, registry_node: Node | None, agent_id: str,
                       registry: m.RegistryConfig) -> None:
    """A registry accepts lowercase names and TTLs of 10 s or more: fail here, not later."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", agent_id):
        where = agent_node or registry_node
        assert where is not None
        where.fail(f"agent.id {agent_id!r} cannot be registered: use 1-64 lowercase letters, "
                   "digits and . _ -")
    if registry.health_ttl_minutes * 60 < 10 and registry_node is not None:
        registry_node.fail("health_ttl_minutes must be at least 10 seconds (0.17) to register")
    if not registry.token and registry_node is not None:
        registry_node.fail("self_register with a url needs token_env or token_file")


def _unique(node: Node | None, values: list[str], what: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen and node is not None:
            node.fail(f"duplicate {what} {value!r}")
        seen.add(value)


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
    _unique(k.get("token_hashes"), [t.digest.hex() for t in tokens], "token hash")
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


def parse_token_entry(node: Node, *, with_limits: bool = False) -> TokenEntry:
    """``with_limits``: the entry may carry ``limits`` (read by ``limits_by_identity``);
    a registry's tokens may not."""
    if isinstance(node.value, dict):
        k = node.mapping({"sha256", "name", "tier", *(("limits",) if with_limits else ())})
        if "sha256" not in k:
            node.fail("a token mapping needs sha256")
        digest = _hash(k["sha256"])
        name = ident(k["name"]) if "name" in k else ""
        tier = ident(k["tier"]) if "tier" in k else "default"
        who = Identity(name=name or f"token:{digest[:8]}", tier=tier, bound=bool(name))
        return TokenEntry(bytes.fromhex(digest), who)
    digest = _hash(node)
    return TokenEntry(bytes.fromhex(digest), Identity(name=f"token:{digest[:8]}"))


def limits_by_identity(nodes: list[Node], tokens: tuple[TokenEntry, ...],
                       ) -> dict[str, m.CallerLimits]:
    """Each identity's ``limits``. Several tokens of one name are one caller, so they must
    not disagree: its tasks, and so its spending, are counted together."""
    found: dict[str, tuple[m.CallerLimits | None, Node]] = {}
    for node, token in zip(nodes, tokens, strict=True):
        limits_node = node.mapping({"sha256", "name", "tier", "limits"}).get("limits") \
            if isinstance(node.value, dict) else None
        limits = parse_caller_limits(limits_node) if limits_node is not None else None
        name = token.identity.name
        if name in found and found[name][0] != limits:
            (limits_node or node).fail(
                f"the tokens of {name!r} are one caller and must have the same limits "
                f"(see {found[name][1].path})")
        found.setdefault(name, (limits, node))
    return {name: limits for name, (limits, _) in found.items() if limits is not None}


def _hash(node: Node) -> str:
    text = node.string()
    if not _HEX64.fullmatch(text):
        node.fail("expected a lowercase hex SHA-256 (64 characters from 0-9a-f); "
                  "make one with 'butler token new'")
    return text


def _swarm(node: Node | None) -> m.SwarmConfig:
    d = m.SwarmConfig()
    if node is None:
        return d
    k = node.mapping({
        "enabled", "max_depth", "budget_usd", "workspace_ttl_hours",
        "max_children_per_task", "max_outbound_concurrency", "routing_threshold",
    })
    return m.SwarmConfig(
        enabled=k["enabled"].boolean() if "enabled" in k else d.enabled,
        max_depth=k["max_depth"].integer(minimum=0, maximum=64) if "max_depth" in k
        else d.max_depth,
        budget_usd=k["budget_usd"].money() if "budget_usd" in k else d.budget_usd,
        workspace_ttl_hours=k["workspace_ttl_hours"].number(minimum=0)
        if "workspace_ttl_hours" in k else d.workspace_ttl_hours,
        max_children_per_task=k["max_children_per_task"].integer(minimum=0, maximum=1000)
        if "max_children_per_task" in k else d.max_children_per_task,
        max_outbound_concurrency=k["max_outbound_concurrency"].integer(minimum=1, maximum=10000)
        if "max_outbound_concurrency" in k else d.max_outbound_concurrency,
        routing_threshold=_threshold(k["routing_threshold"]) if "routing_threshold" in k
        else d.routing_threshold,
    )


def _threshold(node: Node) -> float:
    value = node.number(minimum=0)
    if value > 1:
        node.fail("a router score is between 0 and 1")
    return value


def _registry(node: Node | None, base: Path) -> m.RegistryConfig:
    d = m.RegistryConfig()
    if node is None:
        return d
    k = node.mapping({
        "self_register", "health_ttl_minutes", "url", "token_env", "token_file", "cache_seconds",
        "allow_private_networks", "allow_loopback", "peer_token_env", "peer_token_file",
        "trusted_registrants",
    })
    return m.RegistryConfig(
        self_register=k["self_register"].boolean() if "self_register" in k else d.self_register,
        health_ttl_minutes=k["health_ttl_minutes"].number(minimum=0.05)
        if "health_ttl_minutes" in k else d.health_ttl_minutes,
        url=url(k["url"]) if "url" in k else d.url,
        token=secret(k, base),
        peer_token=secret(k, base, "peer_token"),
        cache_seconds=k["cache_seconds"].number(minimum=0) if "cache_seconds" in k
        else d.cache_seconds,
        allow_private_networks=k["allow_private_networks"].boolean()
        if "allow_private_networks" in k else d.allow_private_networks,
        allow_loopback=k["allow_loopback"].boolean() if "allow_loopback" in k
        else d.allow_loopback,
        trusted_registrants=tuple(ident(n) for n in k["trusted_registrants"].items())
        if "trusted_registrants" in k else d.trusted_registrants,
    )


def _mcp(node: Node | None) -> m.McpServerConfig:
    if node is None:
        return m.McpServerConfig()
    k = node.mapping({"allowed_capabilities"})
    if "allowed_capabilities" not in k:
        return m.McpServerConfig()
    return m.McpServerConfig(allowed_capabilities=k["allowed_capabilities"].strings())


