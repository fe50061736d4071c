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
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import orjson

from butler.runtime.ids import IDS
from internal.protocol.a2a.codec.butler_v2 import encode_artifact, encode_part
from internal.protocol.a2a.model import Artifact, Part, Task
from internal.signing import (
    BadSignature,
    IdentityKey,
    NotCanonical,
    PublicKey,
    b64url,
    canonical,
    jws_claims,
    merkle,
    protected_header,
    sign_protected,
    unb64url,
    verify_jws,
)

RECEIPT_TYPE = "butler-receipt+jws"  # the per-task form, from before the receipt log
LOGGED_TYPE = "butler-receipt+log"
HEAD_TYPE = "butler-log-head+jws"
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


class LoggedReceipt(NamedTuple):
    """A receipt in the receipt log's form: the claims, the leaf they are in this agent's
    log, the inclusion proof, and the signed tree head the proof folds to."""

    claims: dict[str, Any]
    leaf: int
    proof: list[bytes]
    head: str  # a compact JWS of ``HEAD_TYPE`` by the agent's key

    def encode(self) -> str:
        """Its JSON text; only the claims within need their canonical form, which a
        verifier computes anew."""
        return orjson.dumps({"typ": LOGGED_TYPE, "claims": self.claims, "leaf": self.leaf,
                             "proof": [b64url(p) for p in self.proof],
                             "head": self.head}).decode()

    def head_claims(self) -> dict[str, Any]:
        """The head's claims once the proof folds the claims to its root, or
        ``BadSignature`` (the head's own signature is the caller's to check)."""
        head = jws_claims(self.head, HEAD_TYPE)
        rid = self.claims.get("receipt_id")
        size, root = head.get("size"), head.get("root")
        if not isinstance(size, int) or not isinstance(root, str):
            raise BadSignature(f"receipt {rid}: its tree head names no size and root")
        if head.get("agent") != self.claims.get("agent"):
            raise BadSignature(f"receipt {rid}: the tree head is {head.get('agent')}'s log, "
                               f"not {self.claims.get('agent')}'s")
        try:
            merkle.verify_inclusion(canonical(self.claims), self.leaf, size, self.proof,
                                    unb64url(root))
        except (merkle.BadProof, NotCanonical) as exc:
            raise BadSignature(f"receipt {rid}: {exc}") from None
        return head


def parse_logged(receipt: str) -> LoggedReceipt:
    """A logged receipt's parts, unchecked, or ``BadSignature`` when it is not one."""
    try:
        found = orjson.loads(receipt)
    except orjson.JSONDecodeError:
        raise BadSignature("the receipt is not JSON") from None
    if not isinstance(found, dict) or found.get("typ") != LOGGED_TYPE:
        raise BadSignature(f"the receipt is not of type {LOGGED_TYPE}")
    claims, leaf, proof, head = (found.get(k) for k in ("claims", "leaf", "proof", "head"))
    if not (isinstance(claims, dict) and isinstance(leaf, int) and isinstance(head, str)
            and isinstance(proof, list) and len(proof) <= merkle.MAX_PROOF
            and all(isinstance(p, str) for p in proof)):
        raise BadSignature("the receipt's claims, leaf, proof or head are malformed")
    return LoggedReceipt(claims, leaf, [unb64url(p) for p in proof], head)


def signed_part(receipt: str) -> str:
    """The JWS a receipt's signature is on: the receipt itself (per-task form) or its
    tree head (logged form)."""
    return parse_logged(receipt).head if receipt.startswith("{") else receipt


def verify_receipt(receipt: str, key: PublicKey) -> dict[str, Any]:
    """The claims of ``receipt`` once its signature by ``key`` checks and, for a logged
    one, its proof folds the claims to the signed head; else ``BadSignature``."""
    if not receipt.startswith("{"):
        verify_jws(receipt, key)
        return jws_claims(receipt, RECEIPT_TYPE)
    logged = parse_logged(receipt)
    verify_jws(logged.head, key)
    logged.head_claims()
    return logged.claims


def receipt_claims(receipt: str) -> dict[str, Any]:
    """What a receipt says (either form), unchecked (``receipt_check`` checks it)."""
    if receipt.startswith("{"):
        return parse_logged(receipt).claims
    return jws_claims(receipt, RECEIPT_TYPE)


def receipt_id(receipt: str) -> str:
    """The id a receipt names, unchecked: its final audit record's ("" when it names
    none or is not a receipt)."""
    return receipt_leaf(receipt)[0]


def receipt_leaf(receipt: str) -> tuple[str, int]:
    """The id a receipt names and its leaf in its agent's log (-1: a per-task receipt),
    unchecked; ("", -1) for what is not a receipt."""
    try:
        if receipt.startswith("{"):
            logged = parse_logged(receipt)
            claims, leaf = logged.claims, logged.leaf
        else:
            claims, leaf = jws_claims(receipt, RECEIPT_TYPE), -1
    except BadSignature:
        return "", -1
    rid = claims.get("receipt_id")
    return (rid, leaf) if isinstance(rid, str) else ("", -1)


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
    """A task with its own receipt first, that receipt's id and its leaf in this agent's
    receipt log (its final audit record names both; -1: a task sealed before the log)."""

    task: Task
    receipt_id: str
    leaf: int = -1


@dataclass(slots=True)
class Sealing:
    """A terminal task and the claims of its receipt, which is made when the task's row
    is committed: the commit appends the claims to the receipt log, signs one tree head
    for its whole group, and hands each task its proof (``receipt_log``)."""

    task: Task  # its descendants' receipts in ``receipts``, not its own yet
    claims: dict[str, Any]
    receipt: str = ""  # set by the commit
    leaf: int = -1

    def sealed(self) -> Sealed:
        task = self.task
        return Sealed(replace(task, receipts=(self.receipt, *task.receipts[:MAX_RECEIPTS - 1])),
                      self.claims["receipt_id"], self.leaf)


def sealing(task: Task, agent_id: str, url: str) -> Sealing:
    """``task`` (terminal, its descendants' receipts in ``receipts``) and the claims its
    receipt will make."""
    cost, budget = task.cost, task.budget
    claims = {
        "receipt_id": "r-" + IDS.hex128(),
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
    return Sealing(task, claims)


def signed_receipt(claims: Mapping[str, Any], key: IdentityKey) -> str:
    """The per-task form: a compact JWS over the claims (what Butlers before the receipt
    log sent, and what the tests' peers forge)."""
    return sign_protected(key, canonical(claims), _protected(key))


@functools.lru_cache(maxsize=64)  # per identity key: each hosted agent's, and rotations
def _protected(key: IdentityKey) -> str:
    return protected_header(key, {"typ": RECEIPT_TYPE, "jwk": key.public.jwk})
