"""The daemon's side of the registry: announce this agent, discover peers by capability."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from butler.config.model import Config
from butler.delegation.discovery import RegistryDiscovery
from butler.registry.announcer import Announcer
from butler.registry.client import RegistryClient
from internal.http import CONFIGURED, OutboundGuard, OutboundRules, outbound_session

log = logging.getLogger("butler.registry")


class RegistryLink:
    def __init__(self, config: Config, card: Callable[[], Mapping[str, Any]],
                 url: Callable[[], str]) -> None:
        reg = config.registry
        self._session: aiohttp.ClientSession | None = None
        self.announcer: Announcer | None = None
        self.discovery: RegistryDiscovery | None = None
        if not reg.url or not reg.token:
            if reg.self_register:
                log.warning("configurations.registry.self_register is on but no registry url "
                            "and token are set: not registering")
            return
        # The registry's own URL is the operator's: the rules of a configured peer.
        self._session = outbound_session(OutboundGuard(CONFIGURED))
        client = RegistryClient(reg.url, reg.token, session=self._session)
        found = OutboundRules(
            allow_loopback=reg.allow_loopback, allow_private=reg.allow_private_networks,
            loopback_key="configurations.registry.allow_loopback",
            private_key="configurations.registry.allow_private_networks")
        self.discovery = RegistryDiscovery(
            client, self_name=config.agent.id, peer_token=reg.peer_token, static=config.peers,
            trusted_registrants=reg.trusted_registrants,
            trusted_publishers=reg.trusted_publishers,
            guard=OutboundGuard(found), cache_seconds=reg.cache_seconds)
        if reg.self_register:
            self.announcer = Announcer(client, config.agent.id, card, url,
                                       max(10, round(reg.health_ttl_minutes * 60)))

    async def start(self) -> None:
        if self.announcer is not None:
            await self.announcer.start()

    async def stop(self) -> None:
        """Stop announcing (deregister); discovery keeps working until ``close``."""
        if self.announcer is not None:
            await self.announcer.stop()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
