"""YAML -> ``Config``, validating every key; the first problem stops loading."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from butler.config import model as m
from butler.config.node import ConfigError, Node
from internal.protocol.a2a.auth import Identity, TokenEntry

_HEX64 = re.compile(r"[0-9a-f]{64}")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
RESERVED_SKILL_PREFIXES = ("a2a.", "butler.", "admin.")
BUILTIN_SKILLS = ("echo", "memory.write", "memory.read", "memory.search")


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> m.Config:
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(file, "", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(file, "", "not UTF-8 text") from None
    return parse_config(text, file=file, env=env, base_dir=Path(path).resolve().parent)


def parse_config(
    text: str,
    *,
    file: str = "<config>",
    env: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
) -> m.Config:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "?"
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(file, "", f"invalid YAML at {where}: {problem}") from None
    root = Node(file, "", data if data is not None else {}, env)
    top = root.mapping({
        "agent", "data_dir", "configurations", "server", "skills", "peers", "tasks",
        "telemetry", "logging",
    })
    base = base_dir or Path.cwd()
    agent = _agent(top.get("agent"))
    confs = top["configurations"].mapping({"a2a", "swarm", "registry", "mcp_server"}) \
        if "configurations" in top else {}
    data_dir = Path(top["data_dir"].string()) if "data_dir" in top else Path("data") / agent.id
    skills = tuple(_skill(n) for n in top["skills"].items()) if "skills" in top else ()
    _unique(top.get("skills"), [s.id for s in skills], "skill id")
    peers = tuple(_peer(n, base) for n in top["peers"].items()) if "peers" in top else ()
    _unique(top.get("peers"), [p.name for p in peers], "peer name")
    registry = _registry(confs.get("registry"), base)
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
        limits=_limits(top.get("server")),
        tasks=_tasks(top.get("tasks")),
        telemetry=_telemetry(top.get("telemetry")),
        logging=_logging(top.get("logging")),
        skills=skills,
        peers=peers,
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


def _ident(node: Node) -> str:
    text = node.string(max_len=128)
    if not _ID.fullmatch(text):
        node.fail("must be letters, digits and . _ : - (starting with a letter or digit)")
    return text


def _url(node: Node) -> str:
    text = node.string()
    if not re.fullmatch(r"https?://[^\s/@]+(:\d+)?(/\S*)?", text):
        node.fail(f"expected an http:// or https:// URL without credentials, got {text!r}")
    return text.rstrip("/")


def _agent(node: Node | None) -> m.AgentConfig:
    d = m.AgentConfig()
    if node is None:
        return d
    k = node.mapping({"id", "name", "description", "url", "version"})
    return m.AgentConfig(
        id=_ident(k["id"]) if "id" in k else d.id,
        name=k["name"].string(max_len=200) if "name" in k else d.name,
        description=k["description"].string(allow_empty=True) if "description" in k
        else d.description,
        url=_url(k["url"]) if "url" in k else d.url,
        version=k["version"].string(max_len=64) if "version" in k else d.version,
    )


def _a2a(node: Node | None) -> m.A2AConfig:
    d = m.A2AConfig()
    if node is None:
        return d
    k = node.mapping({"enabled", "port", "bind_address", "token_hashes"})
    bind = k["bind_address"].string() if "bind_address" in k else d.bind_address
    if "bind_address" in k:
        try:
            ipaddress.ip_address(bind)
        except ValueError:
            if bind != "localhost":
                k["bind_address"].fail(f"expected an IP address, got {bind!r}")
    tokens = tuple(parse_token_entry(n) for n in k["token_hashes"].items()) \
        if "token_hashes" in k else ()
    _unique(k.get("token_hashes"), [t.digest.hex() for t in tokens], "token hash")
    return m.A2AConfig(
        enabled=k["enabled"].boolean() if "enabled" in k else d.enabled,
        port=k["port"].integer(minimum=0, maximum=65535) if "port" in k else d.port,
        bind_address=bind,
        tokens=tokens,
    )


def parse_token_entry(node: Node) -> TokenEntry:
    if isinstance(node.value, dict):
        k = node.mapping({"sha256", "name", "tier"})
        if "sha256" not in k:
            node.fail("a token mapping needs sha256")
        digest = _hash(k["sha256"])
        name = _ident(k["name"]) if "name" in k else ""
        tier = _ident(k["tier"]) if "tier" in k else "default"
        ident = Identity(name=name or f"token:{digest[:8]}", tier=tier, bound=bool(name))
        return TokenEntry(bytes.fromhex(digest), ident)
    digest = _hash(node)
    return TokenEntry(bytes.fromhex(digest), Identity(name=f"token:{digest[:8]}"))


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
        "max_children_per_task", "max_outbound_concurrency",
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
    )


def _registry(node: Node | None, base: Path) -> m.RegistryConfig:
    d = m.RegistryConfig()
    if node is None:
        return d
    k = node.mapping({
        "self_register", "health_ttl_minutes", "url", "token_env", "token_file", "cache_seconds",
        "allow_private_networks", "allow_loopback", "peer_token_env", "peer_token_file",
    })
    return m.RegistryConfig(
        self_register=k["self_register"].boolean() if "self_register" in k else d.self_register,
        health_ttl_minutes=k["health_ttl_minutes"].number(minimum=0.05)
        if "health_ttl_minutes" in k else d.health_ttl_minutes,
        url=_url(k["url"]) if "url" in k else d.url,
        token=_secret(k, base),
        peer_token=_secret(k, base, "peer_token"),
        cache_seconds=k["cache_seconds"].number(minimum=0) if "cache_seconds" in k
        else d.cache_seconds,
        allow_private_networks=k["allow_private_networks"].boolean()
        if "allow_private_networks" in k else d.allow_private_networks,
        allow_loopback=k["allow_loopback"].boolean() if "allow_loopback" in k
        else d.allow_loopback,
    )


def _mcp(node: Node | None) -> m.McpServerConfig:
    if node is None:
        return m.McpServerConfig()
    k = node.mapping({"allowed_capabilities"})
    if "allowed_capabilities" not in k:
        return m.McpServerConfig()
    return m.McpServerConfig(allowed_capabilities=k["allowed_capabilities"].strings())


def _limits(node: Node | None) -> m.Limits:
    d = m.Limits()
    if node is None:
        return d
    k = node.mapping(set(d.__dataclass_fields__))
    values: dict[str, Any] = {}
    for key, sub in k.items():
        if key.endswith("_seconds"):
            values[key] = sub.number(minimum=0.01)
        else:
            values[key] = sub.integer(minimum=1)
    return m.Limits(**values)


def _tasks(node: Node | None) -> m.TasksConfig:
    d = m.TasksConfig()
    if node is None:
        return d
    k = node.mapping(set(d.__dataclass_fields__))
    return m.TasksConfig(
        retention_hours=k["retention_hours"].number(minimum=0) if "retention_hours" in k
        else d.retention_hours,
        default_timeout_seconds=k["default_timeout_seconds"].number(minimum=0.01)
        if "default_timeout_seconds" in k else d.default_timeout_seconds,
        max_page_size=k["max_page_size"].integer(minimum=1, maximum=1000)
        if "max_page_size" in k else d.max_page_size,
    )


def _telemetry(node: Node | None) -> m.TelemetryConfig:
    d = m.TelemetryConfig()
    if node is None:
        return d
    k = node.mapping({"exporter", "service_name", "otlp_endpoint"})
    return m.TelemetryConfig(
        exporter=k["exporter"].choice(("none", "console", "otlp")) if "exporter" in k
        else d.exporter,
        service_name=k["service_name"].string() if "service_name" in k else d.service_name,
        otlp_endpoint=_url(k["otlp_endpoint"]) if "otlp_endpoint" in k else d.otlp_endpoint,
    )


def _logging(node: Node | None) -> m.LoggingConfig:
    d = m.LoggingConfig()
    if node is None:
        return d
    k = node.mapping({"level", "format"})
    return m.LoggingConfig(
        level=k["level"].choice(("debug", "info", "warning", "error")) if "level" in k
        else d.level,
        format=k["format"].choice(("text", "json")) if "format" in k else d.format,
    )


def _skill(node: Node) -> m.SkillConfig:
    k = node.mapping({
        "id", "name", "description", "capabilities", "tags", "examples", "cost_usd",
        "timeout_seconds", "expose", "tier", "builtin", "command", "python", "max_output_bytes",
    })
    if "id" not in k:
        node.fail("a skill needs an id")
    skill_id = _ident(k["id"])
    runners = [key for key in ("builtin", "command", "python") if key in k]
    if len(runners) != 1:
        node.fail("a skill needs exactly one of builtin, command, python")
    builtin = k["builtin"].choice(BUILTIN_SKILLS) if "builtin" in k else None
    command = k["command"].strings() if "command" in k else None
    if command is not None and not command:
        k["command"].fail("command needs at least the program to run")
    python = k["python"].string() if "python" in k else None
    if python is not None and not re.fullmatch(r"[\w.]+:[\w.]+", python):
        k["python"].fail("expected 'package.module:function'")
    default_caps = (builtin,) if builtin and builtin != "echo" else (skill_id,)
    return m.SkillConfig(
        id=skill_id,
        name=k["name"].string(max_len=200) if "name" in k else skill_id,
        description=k["description"].string(allow_empty=True) if "description" in k else "",
        capabilities=tuple(_capability(n) for n in k["capabilities"].items())
        if "capabilities" in k else default_caps,
        tags=k["tags"].strings() if "tags" in k else (),
        examples=k["examples"].strings() if "examples" in k else (),
        cost_usd=k["cost_usd"].money() if "cost_usd" in k else Decimal("0"),
        timeout_seconds=k["timeout_seconds"].number(minimum=0.01) if "timeout_seconds" in k
        else 60.0,
        expose=k["expose"].boolean() if "expose" in k else False,
        tier=_ident(k["tier"]) if "tier" in k else None,
        builtin=builtin,
        command=command,
        python=python,
        max_output_bytes=k["max_output_bytes"].integer(minimum=1)
        if "max_output_bytes" in k else 1024 * 1024,
    )


def _capability(node: Node) -> str:
    text = _ident(node)
    return text


def _secret(k: dict[str, Node], base: Path, prefix: str = "token") -> str:
    """A bearer token from ``<prefix>_env`` (a variable's name) or ``<prefix>_file``."""
    env_key, file_key = f"{prefix}_env", f"{prefix}_file"
    if env_key in k:
        var = k[env_key].string()
        if var not in k[env_key].env:
            k[env_key].fail(f"environment variable {var} is not set")
        return k[env_key].env[var].strip()
    if file_key in k:
        tpath = Path(k[file_key].string())
        tpath = tpath if tpath.is_absolute() else base / tpath
        try:
            return tpath.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            k[file_key].fail(f"cannot read token file: {exc}")
    return ""


def _peer(node: Node, base: Path) -> m.PeerConfig:
    k = node.mapping({
        "name", "url", "token_env", "token_file", "capabilities", "spend_cap_usd", "cost_usd",
        "connect_timeout_seconds", "timeout_seconds", "max_response_bytes",
    })
    for required in ("name", "url"):
        if required not in k:
            node.fail(f"a peer needs {required}")
    token = _secret(k, base)
    if not token:
        node.fail("a peer needs token_env or token_file holding its bearer token")
    d = m.PeerConfig(name="", url="")
    return m.PeerConfig(
        name=_ident(k["name"]),
        url=_url(k["url"]),
        token=token,
        capabilities=tuple(_capability(n) for n in k["capabilities"].items())
        if "capabilities" in k else (),
        spend_cap_usd=k["spend_cap_usd"].money() if "spend_cap_usd" in k else None,
        cost_usd=k["cost_usd"].money() if "cost_usd" in k else d.cost_usd,
        connect_timeout_seconds=k["connect_timeout_seconds"].number(minimum=0.01)
        if "connect_timeout_seconds" in k else d.connect_timeout_seconds,
        timeout_seconds=k["timeout_seconds"].number(minimum=0.01) if "timeout_seconds" in k
        else d.timeout_seconds,
        max_response_bytes=k["max_response_bytes"].integer(minimum=1024)
        if "max_response_bytes" in k else d.max_response_bytes,
    )
