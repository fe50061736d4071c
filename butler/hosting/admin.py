"""``/v2/admin/agents``: the hosted agents listed, added and removed at run time, for a
caller of tier ``admin`` of the daemon's own agent (docs/hosting.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from butler.hosting.host import AgentHost, Hosted
from internal.http import identity_of, json_response, read_json
from internal.protocol.a2a.model import AuthError, RequestError

ADMIN_AGENTS_PATH = "/v2/admin/agents"


@dataclass(frozen=True)
class AgentsAdmin:
    host: AgentHost
    max_json_depth: int
    body_seconds: float

    def routes(self) -> list[web.RouteDef]:
        return [web.get(ADMIN_AGENTS_PATH, self.list),
                web.post(ADMIN_AGENTS_PATH, self.add),
                web.delete(ADMIN_AGENTS_PATH + "/{id}", self.remove)]

    @staticmethod
    def _admin(request: web.Request) -> None:
        if not identity_of(request).is_admin:
            raise AuthError("forbidden", "managing hosted agents needs a token of tier admin")

    def _json(self, hosted: Hosted) -> dict[str, Any]:
        agent = hosted.config
        return {"id": agent.id, "name": agent.name, "url": self.host.agent_url(agent.id),
                "source": hosted.source, "skills": [s.id for s in agent.skills],
                "peers": [p.name for p in agent.peers]}

    async def list(self, request: web.Request) -> web.Response:
        self._admin(request)
        return json_response({"agents": [self._json(h) for h in self.host.running.values()]})

    async def add(self, request: web.Request) -> web.Response:
        self._admin(request)
        entry = await read_json(request, max_depth=self.max_json_depth,
                                body_seconds=self.body_seconds)
        if not isinstance(entry, dict):
            raise RequestError("invalid_request", "expected a hosted agent as a JSON object")
        return json_response(self._json(await self.host.add(entry)), status=201)

    async def remove(self, request: web.Request) -> web.Response:
        self._admin(request)
        agent_id = request.match_info["id"]
        await self.host.remove(agent_id)
        return json_response({"removed": agent_id})
