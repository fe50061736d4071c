"""The swarm envelope on the wire: the caller chain, depth, budget, trace and delegation tree.

On the Butler /v2 binding it rides in the request body and/or the reference implementation's
headers (``X-Swarm-Agent-Chain``, ``X-Swarm-Depth``, ``X-Swarm-Budget-USD``,
``X-Swarm-Trace-ID``, ``X-Swarm-Tree-ID``). On the standard A2A bindings it is a declared A2A
extension: message metadata under ``SWARM_EXTENSION_URI``, plus the same headers and
``traceparent``. When two places carry a field they must agree. A client that sends neither
starts a new chain.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from internal.protocol.a2a.codec.butler_v2 import AGENT_ID, decode_money
from internal.protocol.a2a.model import Envelope, ExtensionInfo, RequestError

CHAIN_HEADER = "X-Swarm-Agent-Chain"
DEPTH_HEADER = "X-Swarm-Depth"
TRACE_HEADER = "X-Swarm-Trace-ID"
BUDGET_HEADER = "X-Swarm-Budget-USD"
TREE_HEADER = "X-Swarm-Tree-ID"

SWARM_EXTENSION_URI = "urn:butler:a2a:ext:swarm:v1"
EXTENSIONS_HEADER = "A2A-Extensions"
LEGACY_EXTENSIONS_HEADER = "X-A2A-Extensions"

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_DEPTH = re.compile(r"\s*[0-9]{1,6}\s*")  # ASCII: str.isdigit() also takes superscripts
MAX_CHAIN = 64


def _invalid(message: str) -> RequestError:
    return RequestError("invalid_envelope", message)


def decode_v2_envelope(body: Mapping[str, Any], headers: Mapping[str, str]) -> Envelope:
    """The envelope from a Butler /v2 body and/or the reference implementation's headers.

    Both may be present but must then agree; a depth header must equal the chain length.
    """
    chain: tuple[str, ...] | None = None
    if "caller_chain" in body:
        chain = _chain(body["caller_chain"], "caller_chain")
    header_chain = headers.get(CHAIN_HEADER)
    if header_chain is not None:
        items = [s.strip() for s in header_chain.split(",")] if header_chain.strip() else []
        from_header = _chain(items, CHAIN_HEADER)
        if chain is not None and chain != from_header:
            raise _invalid(f"{CHAIN_HEADER} disagrees with caller_chain")
        chain = from_header
    chain = chain or ()
    depth = headers.get(DEPTH_HEADER)
    if depth is not None and (not _DEPTH.fullmatch(depth) or int(depth) != len(chain)):
        raise _invalid(f"{DEPTH_HEADER} must equal the chain length ({len(chain)})")
    budget = _agreeing(body.get("budget"), headers.get(BUDGET_HEADER), "budget", BUDGET_HEADER,
                       decode_money)
    trace = headers.get(TRACE_HEADER) or body.get("trace_id")
    tree = _agreeing(body.get("tree_id"), headers.get(TREE_HEADER), "tree_id", TREE_HEADER,
                     lambda value, _: value)
    for name, value in (("trace", trace), ("tree", tree)):
        if value is not None and (not isinstance(value, str) or not _TRACE_ID.fullmatch(value)):
            raise _invalid(f"{name} id must be 32 lowercase hex characters")
    return Envelope(
        chain=chain, budget_usd=budget, trace_id=trace,
        traceparent=headers.get("traceparent"), tracestate=headers.get("tracestate"),
        tree_id=tree,
    )


def _agreeing(in_body: Any, in_header: str | None, body_name: str, header_name: str,
              decode: Callable[[Any, str], Any]) -> Any:
    """A field the body and a header may both carry: decoded, and the same in both."""
    value = None if in_body is None else decode(in_body, body_name)
    if in_header is not None:
        from_header = decode(in_header, header_name)
        if value is not None and value != from_header:
            raise _invalid(f"{header_name} disagrees with {body_name}")
        value = from_header
    return value


def _chain(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _invalid(f"{where} must be a list of agent ids")
    if len(value) > MAX_CHAIN:
        raise _invalid(f"{where} longer than {MAX_CHAIN}")
    for item in value:
        if not isinstance(item, str) or not AGENT_ID.fullmatch(item):
            raise _invalid(f"{where} entries must be agent ids, got {item!r}")
    return tuple(value)


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


def decode_a2a_envelope(metadata: Mapping[str, Any] | None,
                        headers: Mapping[str, str]) -> Envelope:
    """The envelope from A2A message metadata and headers (either, both or neither)."""
    body: dict[str, Any] = {}
    ext = metadata.get(SWARM_EXTENSION_URI) if metadata else None
    if ext is not None:
        if not isinstance(ext, dict):
            raise _invalid(f"metadata[{SWARM_EXTENSION_URI!r}] must be an object")
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
            raise _invalid("swarm depth must equal the chain length")
    decoded = decode_v2_envelope(body, headers)
    if "trace_id" in body and headers.get(TRACE_HEADER) not in (None, body["trace_id"]):
        raise _invalid(f"{TRACE_HEADER} disagrees with the metadata trace id")
    return decoded


def encode_envelope(chain: tuple[str, ...], budget: Decimal | None,
                    trace_id: str | None, tree_id: str | None = None) -> dict[str, Any]:
    """The metadata entry (the value under ``SWARM_EXTENSION_URI``) for an outbound A2A hop."""
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
        headers[CHAIN_HEADER] = ",".join(chain)
        headers[DEPTH_HEADER] = str(len(chain))
    if budget is not None:
        headers[BUDGET_HEADER] = str(budget)
    return headers


def activated(headers: Mapping[str, str]) -> dict[str, str]:
    """Response headers echoing the swarm extension when the request activated it."""
    if EXTENSIONS_HEADER not in headers and LEGACY_EXTENSIONS_HEADER not in headers:
        return {}
    if SWARM_EXTENSION_URI in requested_extensions(headers):
        return {EXTENSIONS_HEADER: SWARM_EXTENSION_URI}
    return {}
