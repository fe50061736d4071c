"""``GET /v2/overview``: what the daemon's dashboard shows beside the tasks (which it reads
from ``GET /v2/tasks``): the peers with their health and latency, and the spend per caller.
Only for a caller of tier ``admin``: it names every caller and every peer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from aiohttp import web

from butler.config.model import CallerLimits
from butler.delegation.peers import PeerStatus
from butler.metrics import ButlerMetrics
from butler.swarm.spend import CallerUsage, caller_json
from internal.http import identity_of, json_response
from internal.protocol.a2a.model import AuthError

OVERVIEW_PATH = "/v2/overview"


@dataclass(frozen=True)
class Overview:
    agent_id: str
    url: Callable[[], str]
    peers: Callable[[], Awaitable[list[PeerStatus]]]
    limits: Mapping[str, CallerLimits]
    metrics: ButlerMetrics

    def route(self) -> web.RouteDef:
        return web.get(OVERVIEW_PATH, self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        if not identity_of(request).is_admin:
            raise AuthError("forbidden", "the overview needs a token of tier admin")
        return json_response({"agent": {"id": self.agent_id, "url": self.url()},
                              "peers": self._peers(await self.peers()),
                              "spend": self._spend(self.metrics.spend_usage())})

    def _peers(self, peers: list[PeerStatus]) -> list[dict[str, Any]]:
        outcomes: dict[str, dict[str, int]] = {}
        for (peer, outcome), count in self.metrics.delegations.samples():
            outcomes.setdefault(peer, {})[outcome] = int(count)
        return [{"name": p.name, "url": p.url, "source": p.source,
                 "capabilities": list(p.capabilities), "health": p.health,
                 "failures": p.failures,
                 "latency_ms": None if p.latency_seconds is None
                 else round(p.latency_seconds * 1000, 1),
                 "delegations": outcomes.get(p.name, {})} for p in peers]

    def _spend(self, usage: list[CallerUsage]) -> list[dict[str, Any]]:
        """Every caller that spent since the start (from the metrics) or has limits (with
        its rolling windows, from the spend book)."""
        spent = {caller: Decimal(amount) for (caller,), amount
                 in self.metrics.caller_spent.samples()}
        used = {u.caller: u for u in usage}
        rows = []
        for name in sorted(set(spent) | set(self.limits)):
            limits = self.limits.get(name)
            row = caller_json(name, limits, used.get(name)) if limits is not None \
                else {"caller": name}
            row["spent_since_start_usd"] = str(spent.get(name, Decimal("0")))
            rows.append(row)
        return rows
