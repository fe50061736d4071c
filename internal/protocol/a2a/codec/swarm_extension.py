"""The swarm envelope on the standard A2A bindings: a declared A2A extension.

It rides in message metadata under the extension URI, and in the same headers the
Butler /v2 binding uses (``X-Swarm-Agent-Chain``, ``X-Swarm-Depth``,
``X-Swarm-Budget-USD``, ``X-Swarm-Trace-ID``, ``X-Swarm-Tree-ID``, ``traceparent``).
When both carry a field they must agree. A client that sends neither starts a new chain.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from internal.protocol.a2a.codec import envelope
from internal.protocol.a2a.model import Envelope, ExtensionInfo, RequestError

SWARM_EXTENSION_URI = "urn:butler:a2a:ext:swarm:v1"
EXTENSIONS_HEADER = "A2A-Extensions"
LEGACY_EXTENSIONS_HEADER = "X-A2A-Extensions"


def extension_info(params: dict[str, Any] | None = None) -> ExtensionInfo:
    """``params``: the agent's identity key and its rotations (``card_signature``)."""
    return ExtensionInfo(
        uri=SWARM_EXTENSION_URI,
        description="Butler swarm envelope: caller chain, depth, USD budget, trace and tree id, "
                    "in message metadata under this URI and in X-Swarm-* headers",
        required=False,
        params=params,
    )


def requested_extensions(headers: Mapping[str, str]) -> set[str]:
    values = [headers.get(EXTENSIONS_HEADER, ""), headers.get(LEGACY_EXTENSIONS_HEADER, "")]
    return {uri.strip() for value in values for uri in value.split(",") if uri.strip()}


def decode_envelope(metadata: Mapping[str, Any] | None, headers: Mapping[str, str]) -> Envelope:
    """The envelope from message metadata and headers (either, both or neither)."""
    body: dict[str, Any] = {}
    ext = metadata.get(SWARM_EXTENSION_URI) if metadata else None
    if ext is not None:
        if not isinstance(ext, dict):
            raise RequestError("invalid_envelope",
                               f"metadata[{SWARM_EXTENSION_URI!r}] must be an object")
        if "callerChain" in ext:
            body["caller_chain"] = ext["callerChain"]
        if ext.get("budgetUsd") is not None:
            body["budget"] = ext["budgetUsd"]
        if ext.get("traceId") is not None:
            body["trace_id"] = ext["traceId"]
        if ext.get("treeId") is not None:
            body["tree_id"] = ext["treeId"]
        depth = ext.get("depth")
        chain = body.get("caller_chain")
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int | Decimal)
                                  or not isinstance(chain, list) or depth != len(chain)):
            raise RequestError("invalid_envelope", "swarm depth must equal the chain length")
    decoded = envelope.decode_envelope(body, headers)
    if "trace_id" in body and headers.get(envelope.TRACE_HEADER) not in (None, body["trace_id"]):
        raise RequestError("invalid_envelope",
                           f"{envelope.TRACE_HEADER} disagrees with the metadata trace id")
    return decoded


def encode_envelope(chain: tuple[str, ...], budget: Decimal | None,
                    trace_id: str | None, tree_id: str | None = None) -> dict[str, Any]:
    """The metadata entry (the value under ``SWARM_EXTENSION_URI``) for an outbound hop."""
    out: dict[str, Any] = {"callerChain": list(chain), "depth": len(chain)}
    if budget is not None:
        out["budgetUsd"] = str(budget)
    if trace_id:
        out["traceId"] = trace_id
    if tree_id:
        out["treeId"] = tree_id
    return out


def envelope_headers(chain: tuple[str, ...], budget: Decimal | None) -> dict[str, str]:
    headers = {EXTENSIONS_HEADER: SWARM_EXTENSION_URI}
    if chain:
        headers[envelope.CHAIN_HEADER] = ",".join(chain)
        headers[envelope.DEPTH_HEADER] = str(len(chain))
    if budget is not None:
        headers[envelope.BUDGET_HEADER] = str(budget)
    return headers


def activated(headers: Mapping[str, str]) -> dict[str, str]:
    """Response headers echoing the swarm extension when the request activated it."""
    if EXTENSIONS_HEADER not in headers and LEGACY_EXTENSIONS_HEADER not in headers:
        return {}
    if SWARM_EXTENSION_URI in requested_extensions(headers):
        return {EXTENSIONS_HEADER: SWARM_EXTENSION_URI}
    return {}
