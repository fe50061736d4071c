"""The signed receipt of every task this agent ends: who answered, what, at what cost.

A receipt is a compact JWS (EdDSA, by the identity key) over the RFC 8785 form of::

    {"receipt_id", "agent", "url", "task_id", "state", "digest", "cost_usd", "total_usd",
     "spent_usd", "budget_left_usd", "trace_id", "chain", "children", "at"}

``digest`` is the SHA-256 of the canonical result (its parts and artifacts as Butler /v2
writes them); ``chain`` is the caller chain the task came with (the delegation path to
it); ``children`` are the receipt ids of the tasks it delegated. A task carries
its own receipt first, then its descendants', so the caller at the root holds the whole
tree and ``butler receipt verify`` checks it against each signer's card
(``receipt_check``). docs/receipts.md.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, NamedTuple

import orjson

from butler.identity.key_file import AgentIdentity
from butler.runtime.ids import IDS
from internal.protocol.a2a.codec.butler_v2 import encode_artifact, encode_part
from internal.protocol.a2a.model import Artifact, Part, Task
from internal.signing import (
    BadSignature,
    IdentityKey,
    NotCanonical,
    b64url,
    canonical,
    jws_claims,
    protected_header,
    sign_protected,
    unb64url,
)

RECEIPT_TYPE = "butler-receipt+jws"
MAX_RECEIPTS = 256  # in one task's answer: a tree is bounded by depth and fan-out anyway


def result_digest(result: Mapping[str, Any]) -> str:
    """``sha256:`` and the base64url SHA-256 of ``{"parts": [...], "artifacts": [...]}``
    in canonical form, as /v2 writes a task's ``result``."""
    body = {"parts": list(result.get("parts") or []),
            "artifacts": list(result.get("artifacts") or [])}
    try:
        return "sha256:" + b64url(hashlib.sha256(canonical(body)).digest())
    except NotCanonical as exc:  # a float NaN in a skill's data: say so, still sign
        return f"unhashable: {exc}"


def task_digest(task: Task) -> str:
    return parts_digest(task.parts, task.artifacts)


def parts_digest(parts: Iterable[Part], artifacts: Iterable[Artifact]) -> str:
    """``result_digest`` of a task's result parts and artifacts."""
    return result_digest({"parts": [encode_part(p) for p in parts],
                          "artifacts": [encode_artifact(a) for a in artifacts]})


def receipt_claims(jws: str) -> dict[str, Any]:
    """What a receipt says, unchecked (``receipt_check`` checks it)."""
    return jws_claims(jws, RECEIPT_TYPE)


def receipt_id(jws: str) -> str:
    """The id a receipt names, unchecked: its final audit record's, read from its payload
    alone ("" when it names none)."""
    parts = jws.split(".")
    try:
        claims = orjson.loads(unb64url(parts[1])) if len(parts) == 3 else None
    except (BadSignature, orjson.JSONDecodeError):
        return ""
    rid = claims.get("receipt_id") if isinstance(claims, dict) else None
    return rid if isinstance(rid, str) else ""


def direct_children(receipts: Iterable[str]) -> list[str]:
    """The receipt ids among ``receipts`` (a run's children's, each with its own
    descendants) that no other one lists as its child."""
    claims = []
    for jws in receipts:
        try:
            claims.append(receipt_claims(jws))
        except BadSignature:
            continue  # a peer's garbage: kept as it came, listed by nobody
    below = {c for claim in claims for c in claim.get("children") or [] if isinstance(c, str)}
    return [str(c["receipt_id"]) for c in claims if c.get("receipt_id") not in below]


class Sealed(NamedTuple):
    """A task with its own receipt first, and that receipt's id (its final audit record
    names it)."""

    task: Task
    receipt_id: str


def seal(task: Task, identity: AgentIdentity, agent_id: str, url: str) -> Sealed:
    """``task`` (terminal, its descendants' receipts in ``receipts``) with its own first."""
    cost, budget = task.cost, task.budget
    rid = "r-" + IDS.hex128()
    claims = {
        "receipt_id": rid,
        "agent": agent_id,
        "url": url,
        "task_id": task.wire_id,
        "state": task.state.value,
        "digest": task_digest(task),
        "cost_usd": str(cost.cost_usd) if cost is not None else "0",
        "total_usd": str(cost.total_usd) if cost is not None else "0",
        "spent_usd": str(budget.spent_usd) if budget is not None else "0",
        "budget_left_usd": str(budget.left_usd) if budget is not None else "0",
        "trace_id": task.trace_id,
        "chain": list(task.chain),
        "children": direct_children(task.receipts),
        "at": task.updated_at,
    }
    own = sign_protected(identity.key, canonical(claims), _protected(identity.key))
    return Sealed(replace(task, receipts=(own, *task.receipts[:MAX_RECEIPTS - 1])), rid)


@functools.lru_cache(maxsize=64)  # per identity key: each hosted agent's, and rotations
def _protected(key: IdentityKey) -> str:
    return protected_header(key, {"typ": RECEIPT_TYPE, "jwk": key.public.jwk})
