"""``GET /.well-known/ai-catalog.json``: this daemon's AI Catalog (ARD v0.9) manifest.

One entry per agent it exposes (its own and each hosted one: the A2A card by URL), and
one for its MCP endpoint when it serves one. Each entry says only what the agent's public
card says (the skills an anonymous caller sees), names the agent's identity key as
``trustManifest.identity`` and is signed by it (``butler/registry/catalog_entry.py``).
Public like the card, and cached the same way: an ETag over the body, which is encoded
and signed again only when the entries changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from butler.identity.key_file import AgentIdentity
from butler.registry.catalog_entry import (
    SPEC_VERSION,
    card_entry,
    mcp_entry,
    publisher_of_url,
    sign_entry,
)
from internal.protocol.a2a.codec import exact_json

CATALOG_PATH = "/.well-known/ai-catalog.json"
MAX_AGE_SECONDS = 300


@dataclass(frozen=True)
class ExposedAgent:
    """One agent as the catalog sees it: its public /v2 card, where it is served, its key."""

    card: Mapping[str, Any]
    base_url: str
    identity: AgentIdentity | None
    mcp: bool = False  # whether ``base_url`` + /mcp serves it over MCP


def publisher_for(configured: str, url: str) -> str:
    """The configured publisher domain, else the host the daemon is reached at."""
    return configured or publisher_of_url(url)


def build_catalog(name: str, publisher: str, agents: Iterable[ExposedAgent]) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    for agent in agents:
        entry = card_entry(agent.card, publisher=publisher, base_url=agent.base_url)
        found = [entry, mcp_entry(entry, base_url=agent.base_url)] if agent.mcp else [entry]
        for item in found:
            entries.append(sign_entry(item, agent.identity.key, agent.identity.rotations)
                           if agent.identity is not None else item)
    host: dict[str, str] = {"displayName": name}
    if not publisher.replace(".", "").isdigit():  # did:web names a domain, never an address
        host["identifier"] = f"did:web:{publisher}"
    return {"specVersion": SPEC_VERSION, "host": host, "entries": entries}


class CatalogRoute:
    def __init__(self, name: str, publisher: Callable[[], str],
                 agents: Callable[[], list[ExposedAgent]]) -> None:
        self._name = name
        self._publisher = publisher
        self._agents = agents
        self._cached: tuple[tuple[Any, ...], bytes, str] | None = None

    def routes(self) -> list[web.RouteDef]:
        return [web.get(CATALOG_PATH, self.get)]

    def body(self) -> tuple[bytes, str]:
        agents = self._agents()
        publisher = self._publisher()
        # Not ``updated_at``: the card says when it was built, which is every request.
        facts = (publisher, *((exact_json.dumps_bytes(
            {k: v for k, v in a.card.items() if k != "updated_at"}), a.base_url, a.mcp,
                               a.identity.kid if a.identity else None) for a in agents))
        if self._cached is None or self._cached[0] != facts:
            body = exact_json.dumps_bytes(build_catalog(self._name, publisher, agents))
            etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            self._cached = (facts, body, etag)
        return self._cached[1], self._cached[2]

    async def get(self, request: web.Request) -> web.Response:
        body, etag = self.body()
        headers = {"ETag": etag, "Cache-Control": f"public, max-age={MAX_AGE_SECONDS}"}
        match = request.headers.get("If-None-Match")
        if match is not None and etag in {t.strip().removeprefix("W/") for t in match.split(",")}:
            return web.Response(status=304, headers=headers)
        return web.Response(body=body, content_type="application/json", headers=headers)
