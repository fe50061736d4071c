"""Config sections a hosted agent (``agents:``) has too: its callers' tokens, swarm limits and
registry announcement; and the checks they share."""

from __future__ import annotations

import re
from pathlib import Path

from butler.config import model as m
from butler.config.caller_limits import parse_caller_limits
from butler.config.common import DOMAIN, ident, secret, url
from butler.config.node import Node
from internal.http import TokenEntry
from internal.protocol.a2a.model import Identity

_HEX64 = re.compile(r"[0-9a-f]{64}")


def check_registrable(agent_node: Node | None, registry_node: Node | None, agent_id: str,
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


def unique(node: Node | None, values: list[str], what: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen and node is not None:
            node.fail(f"duplicate {what} {value!r}")
        seen.add(value)


def parse_token_entry(node: Node, *, with_limits: bool = False) -> TokenEntry:
    """``with_limits``: the entry may carry ``limits`` (read by ``limits_by_identity``);
    a registry's tokens may not."""
    if isinstance(node.value, dict):
        k = node.mapping({"sha256", "name", "tier", *(("limits",) if with_limits else ())})
        if "sha256" not in k:
            node.fail("a token mapping needs sha256")
        digest = token_hash(k["sha256"])
        name = ident(k["name"]) if "name" in k else ""
        tier = ident(k["tier"]) if "tier" in k else "default"
        who = Identity(name=name or f"token:{digest[:8]}", tier=tier, bound=bool(name))
        return TokenEntry(bytes.fromhex(digest), who)
    digest = token_hash(node)
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


def token_hash(node: Node) -> str:
    text = node.string()
    if not _HEX64.fullmatch(text):
        node.fail("expected a lowercase hex SHA-256 (64 characters from 0-9a-f); "
                  "make one with 'butler token new'")
    return text


def parse_swarm(node: Node | None) -> m.SwarmConfig:
    d = m.SwarmConfig()
    if node is None:
        return d
    k = node.mapping({
        "enabled", "max_depth", "budget_usd", "workspace_ttl_hours",
        "max_children_per_task", "max_outbound_concurrency", "routing_threshold",
        "input_wait_seconds",
        "routing_semantic",
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
        input_wait_seconds=k["input_wait_seconds"].number(minimum=0.01)
        if "input_wait_seconds" in k else d.input_wait_seconds,
        routing_semantic=k["routing_semantic"].boolean() if "routing_semantic" in k
        else d.routing_semantic,
    )


def _threshold(node: Node) -> float:
    value = node.number(minimum=0)
    if value > 1:
        node.fail("a router score is between 0 and 1")
    return value


def parse_registry(node: Node | None, base: Path) -> m.RegistryConfig:
    d = m.RegistryConfig()
    if node is None:
        return d
    k = node.mapping({
        "self_register", "health_ttl_minutes", "url", "token_env", "token_file", "cache_seconds",
        "allow_private_networks", "allow_loopback", "peer_token_env", "peer_token_file",
        "trusted_registrants", "trusted_publishers",
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
        trusted_publishers=tuple(_publisher(n) for n in k["trusted_publishers"].items())
        if "trusted_publishers" in k else d.trusted_publishers,
    )


def _publisher(node: Node) -> str:
    text = node.string().lower().rstrip(".")
    if not DOMAIN.fullmatch(text):
        node.fail("expected a domain name (an AI Catalog publisher), e.g. acme.com")
    return text
