"""The agent cards, built per request from live state: Butler's own (``GET /v2/card``)
and the A2A card (well-known URL and extended card) with the same exposure rules."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from butler.config.model import Config
from butler.identity.key_file import AgentIdentity
from butler.routing.router import stages as routing_stages
from butler.runtime.clock import now_iso
from butler.skills.catalog import SkillCatalog, is_reserved
from internal.protocol.a2a.codec.card_signature import card_signer
from internal.protocol.a2a.codec.swarm_envelope import extension_info
from internal.protocol.a2a.model import CardInfo, Identity, SkillInfo


def build_card(config: Config, catalog: SkillCatalog, identity: Identity | None,
               url: str, agent: AgentIdentity | None = None) -> dict[str, Any]:
    """``agent``: this agent's identity key, whose public half the card names (the
    registry keeps it with the name: key continuity)."""
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
                "bridge_fidelity": s.fidelity.to_dict(),
                **({"input_schema": s.config.input_schema}
                   if s.config.input_schema is not None else {}),
            }
            for s in skills
        ],
        "auth_schemes": ["bearer"],
        "streaming": True,
        "swarm": {"max_depth": config.swarm.max_depth,
                  "budget_cap_usd": str(config.swarm.budget_usd),
                  "routing_stages": list(routing_stages(config.swarm.routing_semantic))},
        "updated_at": now_iso(),
        **(agent.v2_card_fields() if agent is not None else {}),
    }


def build_a2a_card(config: Config, catalog: SkillCatalog, identity: Identity | None,
                   url: str, grpc_url: str | None = None,
                   agent: AgentIdentity | None = None) -> CardInfo:
    """The A2A card: anonymous callers see untiered skills, others their tier's too.

    A skill's tags are its configured tags plus the capabilities it advertises. Its input
    schema and bridge fidelity stay on the /v2 card: A2A's AgentSkill has no field for
    them, and the card stays one any strict A2A reader accepts (docs/protocol.md).
    With ``agent``, the card names its identity key and is signed (docs/receipts.md).
    """
    allowed = config.mcp_server.allowed_capabilities
    skills = []
    for skill in catalog.visible(identity):
        caps = [c for c in skill.config.capabilities
                if not is_reserved(c) and (allowed is None or c in allowed)]
        skills.append(SkillInfo(
            id=skill.id, name=skill.config.name,
            description=skill.config.description or skill.config.name,
            tags=tuple(dict.fromkeys((*skill.config.tags, *caps))),
            examples=skill.config.examples,
            input_modes=skill.config.input_modes, output_modes=skill.config.output_modes,
        ))
    return CardInfo(
        name=config.agent.name,
        description=config.agent.description,
        version=config.agent.version,
        base_url=url,
        skills=tuple(skills),
        push_notifications=config.a2a.push_notifications.enabled,
        extensions=(extension_info(agent.card_params(config.agent.id)
                                   if agent is not None else None),),
        legacy_v03=config.a2a.legacy_v03_card,
        grpc_url=grpc_url,
        sign=card_signer(agent.key) if agent is not None else None,
    )
