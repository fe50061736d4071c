"""The swarm envelope on the Butler /v2 binding: the caller chain, depth, budget, trace and
delegation tree, from the request body and/or the reference implementation's headers."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from internal.protocol.a2a.codec.butler_v2 import AGENT_ID, decode_money
from internal.protocol.a2a.model import Envelope, RequestError

CHAIN_HEADER = "X-Swarm-Agent-Chain"
DEPTH_HEADER = "X-Swarm-Depth"
TRACE_HEADER = "X-Swarm-Trace-ID"
BUDGET_HEADER = "X-Swarm-Budget-USD"
TREE_HEADER = "X-Swarm-Tree-ID"

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_DEPTH = re.compile(r"\s*[0-9]{1,6}\s*")  # ASCII: str.isdigit() also takes superscripts
MAX_CHAIN = 64


def _invalid(message: str) -> RequestError:
    return RequestError("invalid_envelope", message)


def decode_envelope(body: Mapping[str, Any], headers: Mapping[str, str]) -> Envelope:
    """The envelope from the body and/or the reference implementation's headers.

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
