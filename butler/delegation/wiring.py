"""Builds the daemon's delegator from its config."""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.trace import Tracer

from butler.config.model import Config
from butler.delegation.delegator import PeerDelegator
from butler.delegation.peer_identity import PINS_FILE, PeerIdentities, PinStore
from butler.delegation.peers import Discovery, from_config
from internal.http import ResolverFactory


def make_delegator(cfg: Config, tracer: Tracer, audit: Callable[..., None],
                   discover: Discovery | None, *,
                   names: ResolverFactory | None = None) -> PeerDelegator:
    """``audit``: where its delegation records go; ``discover``: the registry's peers
    (None without a registry); ``names``: the resolver peers' host names go through (the
    system's by default)."""
    return PeerDelegator(
        agent_id=cfg.agent.id,
        static=from_config(cfg.peers),
        tracer=tracer,
        audit=audit,
        max_concurrency=cfg.swarm.max_outbound_concurrency,
        discover=discover,
        names=names,
        identities=PeerIdentities(PinStore(cfg.data_dir / PINS_FILE)),
    )
