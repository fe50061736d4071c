"""The receipt log's public routes: its latest signed tree head, and the consistency
proof between two of its heads' sizes, so that anyone holding an older head can check
that the log still extends it (docs/receipts.md). Public as the card is, and limited per
address by the gate as every route is; a proof between two sizes never changes, so it
is cacheable for good."""

from __future__ import annotations

from aiohttp import web

from butler.engine.store import TaskStore
from butler.identity.receipts import HEAD_TYPE
from internal.http import json_response
from internal.protocol.a2a.model import RequestError
from internal.signing import b64url, jws_claims, merkle

HEAD_PATH = "/v2/log/head"
CONSISTENCY_PATH = "/v2/log/consistency"
PATHS = (HEAD_PATH, CONSISTENCY_PATH)
_MAX_SIZE = 1 << 62


def log_routes(store: TaskStore) -> list[web.RouteDef]:
    async def latest(request: web.Request) -> web.Response:
        head = await store.log_head()
        size = 0 if head is None else jws_claims(head, HEAD_TYPE).get("size")
        return json_response({"size": size, "head": head},
                             headers={"Cache-Control": "no-cache", "ETag": f'"{size}"'})

    async def consistency(request: web.Request) -> web.Response:
        old, new = _size(request, "from"), _size(request, "to")
        head = await store.log_head(new)
        if head is None:
            raise RequestError("invalid_params", f"the log has no signed head of size {new}")
        try:
            proof = await store.log_consistency(old, new)
        except merkle.BadProof as exc:
            raise RequestError("invalid_params", str(exc)) from None
        return json_response({"from": old, "to": new, "head": head,
                              "proof": [b64url(p) for p in proof]},
                             headers={"Cache-Control": "public, max-age=31536000, immutable"})

    return [web.get(HEAD_PATH, latest), web.get(CONSISTENCY_PATH, consistency)]


def _size(request: web.Request, name: str) -> int:
    text = request.query.get(name, "")
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < _MAX_SIZE:
        raise RequestError("invalid_params", f"{name} must be a log size, a whole number "
                                             "from 1")
    return int(text)
