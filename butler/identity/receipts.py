"""The signed receipt of every task this agent ends: who answered, what, at what cost.

A receipt is a compact JWS (EdDSA, by the identity key) over the RFC 8785 form of::

    {"receipt_id", "agent", "url", "task_id", "state", "digest", "cost_usd", "total_usd",
     "spent_usd", "budget_left_usd", "trace_id", "children", "at"}

``digest`` is the SHA-256 of the canonical result (its parts and artifacts as Butler /v2
writes them); ``children`` are the receipt ids of the tasks it delegated. A task carries
its own receipt first, then its descendants', so the caller at the root holds the whole
tree and ``butler receipt verify`` checks it against each signer's card
(``receipt_check``). docs/receipts.md.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from butler.identity.key_file import AgentIdentity
from butler.ids import IDS
from internal.protocol.a2a.codec.butler_v2 import encode_artifact, encode_part
from internal.protocol.a2a.codec.jcs import NotCanonical, canonical
from internal.protocol.a2a.model import Artifact, Part, Task
from internal.signing import (
    BadSignature,
    IdentityKey,
    b64url,
    jws_claims,
    protected_header,
    sign_protected,
)

RECEIPT_TYPE = "butler-receipt+jws"
MAX_RECEIPTS = 256  # in one task's answer: a tree is bounded by depth and fan-out anyway
_SEALED_MAX = 1024  # more than the tasks that end between a seal and its record


@dataclass(frozen=True, slots=True)
class Sealed:
    """What ``seal`` made a receipt of: the task's row keeps the receipt from this
    (``receipt_rows``) and its final audit record names it (``receipt_id``), neither
    decoding the JWS again."""

    task: Task  # as sealed, this receipt first: the one object the store is handed
    receipt_id: str
    agent: str
    url: str
    signature: str  # base64url, as in the JWS


# The receipts sealed last, each until its task's final record named it.
_SEALED: dict[str, Sealed] = {}


def sealed(jws: str) -> Sealed | None:
    return _SEALED.get(jws)


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
    known = _SEALED.pop(jws, None)
    if known is not None:
        return known.receipt_id
    try:
        return str(receipt_claims(jws).get("receipt_id", ""))
    except BadSignature:
        return ""


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


def seal(task: Task, identity: AgentIdentity, agent_id: str, url: str) -> Task:
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
        "children": direct_children(task.receipts),
        "at": task.updated_at,
    }
    own = sign_protected(identity.key, canonical(claims), _protected(identity.key))
    done = replace(task, receipts=(own, *task.receipts[:MAX_RECEIPTS - 1]))
    if len(_SEALED) >= _SEALED_MAX:  # a seal whose record never came: the oldest
        del _SEALED[next(iter(_SEALED))]
    _SEALED[own] = Sealed(done, rid, agent_id, url, own.rpartition(".")[2])
    return done


@functools.lru_cache(maxsize=64)  # per identity key: each hosted agent's, and rotations
def _protected(key: IdentityKey) -> str:
    return protected_header(key, {"typ": RECEIPT_TYPE, "jwk": key.public.jwk})
