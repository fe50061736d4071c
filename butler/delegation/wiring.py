"""Builds the daemon's delegator from its config."""

from __future__ import annotations

from typing import TYPE_CHECKING

from butler.delegation.delegator import PeerDelegator
from butler.delegation.peer_identity import PeerIdentities
from butler.delegation.peers import from_config
from butler.identity.pins import PINS_FILE, PinStore
from internal.http import ResolverFactory

if TYPE_CHECKING:
    from butler.daemon import Daemon


def make_delegator(daemon: Daemon, *, names: ResolverFactory | None = None) -> PeerDelegator:
    """``names``: the resolver peers' host names go through (the system's by default)."""
    cfg = daemon.config
    return PeerDelegator(
        agent_id=cfg.agent.id,
        static=from_config(cfg.peers),
        tracer=daemon.tracer,
        audit=daemon.engine.deps.audit,
        max_concurrency=cfg.swarm.max_outbound_concurrency,
        discover=daemon.registry_link.discovery,
        names=names,
        identities=PeerIdentities(PinStore(cfg.data_dir / PINS_FILE)),
    )
