"""``GET /.well-known/agent-card.json``: the public A2A agent card, with HTTP caching.

Which card is negotiated on ``A2A-Version`` (the header A2A 1.0 clients send, and whose
absence means 0.3): ``1.x`` gets a clean 1.0 card that a strict 1.0 schema or protobuf
parser accepts; ``0.3`` gets the 0.3 card; no header gets the 1.0 card with the fields
0.3 clients read added beside it (as the official SDK serves it), unless the operator
turned those off. Answers say ``Vary: A2A-Version``.

The card's facts are read per request from live state; it is encoded and signed again
only when they changed (a signature and canonical JSON cost more than comparing them).
Its ETag is a hash of the body and ``Last-Modified`` is when this process first served
a body with that hash.
"""

from __future__ import annotations

import hashlib
import time
from email.utils import formatdate, parsedate_to_datetime

from aiohttp import web

from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.codec.card import encode_card, encode_card_v03, encode_card_v1
from internal.protocol.a2a.model import (
    LEGACY_VERSION,
    PROTOCOL_VERSION,
    VERSION_HEADER,
    WELL_KNOWN_CARD_PATH,
    CardInfo,
    version_matches,
)
from internal.protocol.a2a.server._operations import CardSource


class CardRoute:
    def __init__(self, card: CardSource, *, max_age_seconds: int = 300) -> None:
        self.card = card
        self.max_age = max_age_seconds
        self._first_served: dict[str, float] = {}  # ETag -> when first served
        # Per card version served: the facts it was encoded from, its body, ETag, date.
        self._encoded: dict[str, tuple[CardInfo, bytes, str, float]] = {}

    def routes(self) -> list[web.RouteDef]:
        return [web.get(WELL_KNOWN_CARD_PATH, self.public)]

    def _stamp(self, body: bytes) -> tuple[str, float]:
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        if etag not in self._first_served:
            if len(self._first_served) >= 64:  # the card changed many times: forget the oldest
                del self._first_served[next(iter(self._first_served))]
            self._first_served[etag] = float(int(time.time()))
        return etag, self._first_served[etag]

    @staticmethod
    def _version(request: web.Request) -> str:
        """Which card: "" (1.0 with the 0.3 fields), 0.3, or a clean 1.0."""
        asked = request.headers.get(VERSION_HEADER, "").strip()
        if not asked:
            return ""
        return LEGACY_VERSION if version_matches(asked, LEGACY_VERSION) else PROTOCOL_VERSION

    def _negotiated(self, info: CardInfo, version: str) -> dict[str, object]:
        if not version:
            return encode_card(info)
        if version == LEGACY_VERSION:
            return encode_card_v03(info)
        return encode_card_v1(info)

    def _body(self, request: web.Request) -> tuple[bytes, str, float]:
        info, version = self.card(None), self._version(request)
        known = self._encoded.get(version)
        if known is None or known[0] != info:
            body = exact_json.dumps_bytes(self._negotiated(info, version))
            known = (info, body, *self._stamp(body))
            self._encoded[version] = known
        return known[1], known[2], known[3]

    async def public(self, request: web.Request) -> web.Response:
        body, etag, modified = self._body(request)
        headers = {"ETag": etag, "Last-Modified": formatdate(modified, usegmt=True),
                   "Cache-Control": f"public, max-age={self.max_age}",
                   "Vary": VERSION_HEADER}
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
