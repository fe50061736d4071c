"""``GET /.well-known/agent-card.json``: the public A2A agent card, with HTTP caching.

The card is built per request from live state; its ETag is a hash of the body and
``Last-Modified`` is when this process first served a body with that hash.
"""

from __future__ import annotations

import hashlib
import time
from email.utils import formatdate, parsedate_to_datetime

from aiohttp import web

from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.codec.card import encode_card
from internal.protocol.a2a.model import WELL_KNOWN_CARD_PATH
from internal.protocol.a2a.server._operations import CardSource


class CardRoute:
    def __init__(self, card: CardSource, *, max_age_seconds: int = 300) -> None:
        self.card = card
        self.max_age = max_age_seconds
        self._etag = ""
        self._modified = 0.0

    def routes(self) -> list[web.RouteDef]:
        return [web.get(WELL_KNOWN_CARD_PATH, self.public)]

    def _stamp(self, body: bytes) -> tuple[str, float]:
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        if etag != self._etag:
            self._etag, self._modified = etag, float(int(time.time()))
        return self._etag, self._modified

    async def public(self, request: web.Request) -> web.Response:
        body = exact_json.dumps_bytes(encode_card(self.card(None)))
        etag, modified = self._stamp(body)
        headers = {"ETag": etag, "Last-Modified": formatdate(modified, usegmt=True),
                   "Cache-Control": f"public, max-age={self.max_age}"}
        if _not_modified(request, etag, modified):
            return web.Response(status=304, headers=headers)
        return web.Response(body=body, content_type="application/json", headers=headers)


def _not_modified(request: web.Request, etag: str, modified: float) -> bool:
    match = request.headers.get("If-None-Match")
    if match is not None:
        tags = {t.strip().removeprefix("W/") for t in match.split(",")}
        return "*" in tags or etag in tags
    since = request.headers.get("If-Modified-Since")
    if since is None:
        return False
    try:
        return parsedate_to_datetime(since).timestamp() >= modified
    except (TypeError, ValueError):
        return False
