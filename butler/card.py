"""The agent card (``GET /v2/card``), built per request from live state."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from butler.config.model import Config
from butler.engine.clock import now_iso
from butler.skills.catalog import SkillCatalog, is_reserved
from internal.protocol.a2a.auth import Identity


def build_card(config: Config, catalog: SkillCatalog, identity: Identity | None,
               url: str) -> dict[str, Any]:
    skills = catalog.visible(identity)
    allowed = config.mcp_server.allowed_capabilities

    def advertised(caps: Iterable[str]) -> list[str]:
        """Never a reserved name, and with ``allowed_capabilities`` set only those."""
        return [c for c in caps if not is_reserved(c) and (allowed is None or c in allowed)]

    return {
        "agent_id": config.agent.id,
        "name": config.agent.name,
        "description": config.agent.description,
        "url": url,
        "version": config.agent.version,
        "capabilities": advertised(catalog.capabilities(identity)),
        "skills": [
            {
                "id": s.id,
                "name": s.config.name,
                "description": s.config.description,
                "capabilities": advertised(s.config.capabilities),
                "tags": list(s.config.tags),
                "examples": list(s.config.examples),
                "cost_usd": str(s.config.cost_usd),
            }
            for s in skills
        ],
        "auth_schemes": ["bearer"],
        "streaming": True,
        "swarm": {"max_depth": config.swarm.max_depth,
                  "budget_cap_usd": str(config.swarm.budget_usd)},
        "updated_at": now_iso(),
    }
