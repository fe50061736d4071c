"""OpenAPI documents of Butler's HTTP APIs: YAML shipped as package data, served as JSON.

A document is read on the first request for it, never at import or start-up.
"""

from __future__ import annotations

import asyncio
from importlib import resources
from typing import Any

import yaml
from aiohttp import web

from internal.protocol.a2a.codec import exact_json


def load(package: str, name: str) -> dict[str, Any]:
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict):
        raise ValueError(f"{package}/{name} is not an OpenAPI document")
    return doc


def document_route(path: str, package: str, name: str) -> web.RouteDef:
    """``GET path``: the document ``package/name`` as JSON."""
    cached: list[bytes] = []

    async def handler(request: web.Request) -> web.Response:
        if not cached:
            doc = await asyncio.to_thread(load, package, name)
            cached.append(exact_json.dumps_bytes(doc))
        return web.Response(body=cached[0], content_type="application/json")

    return web.get(path, handler)
