"""Static pages shipped as package data (the dashboards of the daemon and the registry):
one HTML page and its assets, no build step and nothing from another origin.

The page and its assets are public: they hold no data. Every data call the page makes
carries the bearer token the person typed, through the same gate as any other client.
Each file is read on its first request, never at import or start-up, then kept.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

from aiohttp import web

from internal.http._json_http import Handler

CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
# Scripts, styles and data from this origin only, never inline (no 'unsafe-inline'), no
# form submission anywhere (the login form is read by the script: a token never lands in
# a URL, even with the script blocked), and no framing.
CONTENT_SECURITY_POLICY = ("default-src 'self'; base-uri 'none'; form-action 'none'; "
                           "frame-ancestors 'none'; object-src 'none'")
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class StaticPage:
    """``GET path``: the page ``package/page``; ``GET path/NAME``: each of ``assets``."""

    path: str
    package: str
    page: str
    assets: tuple[str, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path served: the gate lets them through without a token."""
        return (self.path, *(f"{self.path}/{name}" for name in self.assets))

    def routes(self) -> list[web.RouteDef]:
        files = (self.page, *self.assets)
        return [web.get(path, self._file(name))
                for path, name in zip(self.paths, files, strict=True)]

    def _file(self, name: str) -> Handler:
        content_type = CONTENT_TYPES[PurePosixPath(name).suffix]
        cached: list[bytes] = []

        async def handler(request: web.Request) -> web.Response:
            if not cached:
                cached.append(await asyncio.to_thread(self._read, name))
            return web.Response(body=cached[0], content_type=content_type, charset="utf-8",
                                headers=PAGE_HEADERS)

        return handler

    def _read(self, name: str) -> bytes:
        return resources.files(self.package).joinpath(name).read_bytes()
