"""Checking a task's receipts as one tree: each signed by the key its signer's card names
(or one that key's rotations lead from), and naming that card's agent and URL; the root's
digest the task's very result, every child listed present, none left over, one trace,
each child delegated by its parent (its recorded path is its parent's and then its
parent), and costs that add up."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from butler.identity.receipts import (
    receipt_claims,
    result_digest,
    signed_part,
    verify_receipt,
)
from internal.protocol.a2a.client import offered_interfaces
from internal.protocol.a2a.codec.butler_v2 import parse_amount
from internal.protocol.a2a.codec.card_signature import claimed_agent, key_rotations, verify_card
from internal.protocol.a2a.model import agent_key
from internal.signing import (
    BadSignature,
    PublicKey,
    jws_payload,
    public_key_from_jwk,
    rotated_to,
)

CardFetcher = Callable[[str], Awaitable[Mapping[str, Any]]]


@dataclass
class Receipt:
    claims: dict[str, Any]
    kid: str
    logged: bool = True  # in its agent's receipt log; False: the per-task form
    children: list[Receipt] = field(default_factory=list)

    @property
    def path(self) -> list[str] | None:
        return _path(self.claims, self.logged)

    def lines(self, indent: int = 0) -> list[str]:
        c = self.claims
        line = (f"{'  ' * indent}{c.get('agent')}  {c.get('state')}  task {c.get('task_id')}  "
                f"cost {c.get('cost_usd')} USD, total {c.get('total_usd')} USD  "
                f"receipt {c.get('receipt_id')}  key {self.kid}")
        return [line, *(ln for child in self.children for ln in child.lines(indent + 1))]

    def to_json(self) -> dict[str, Any]:
        """The tree as ``butler receipt verify --json`` prints it: each receipt's signed
        claims, the key that signed them, the receipts of its hops below."""
        return {"claims": self.claims, "kid": self.kid,
                "children": [child.to_json() for child in self.children]}


def _money(claims: Mapping[str, Any], name: str) -> Decimal:
    value = parse_amount(claims.get(name))
    if value is None:  # a huge one too: sums of them would overflow
        raise BadSignature(f"receipt {claims.get('receipt_id')}: {name} is not a "
                           "decimal amount")
    return value


async def _signer(receipt: str, claims: Mapping[str, Any], card_of: CardFetcher,
                  cards: dict[str, tuple[PublicKey, Mapping[str, Any]]]) -> PublicKey:
    """The receipt's key, once its signer's card is checked to name it (or a successor).
    A logged receipt is signed by its tree head, which its proof must fold up to."""
    rid, url = claims.get("receipt_id"), claims.get("url")
    if not isinstance(url, str):
        raise BadSignature(f"receipt {rid} names no signer URL")
    header, _ = jws_payload(signed_part(receipt))
    key = public_key_from_jwk(header.get("jwk"))
    if url not in cards:  # each signer's card is read and checked once
        card = await card_of(url)
        try:
            cards[url] = (verify_card(card), card)
        except BadSignature as exc:
            raise BadSignature(f"the card at {url}: {exc}") from None
    named, card = cards[url]
    if key.kid != named.kid and not rotated_to(key, named.kid, key_rotations(card)):
        raise BadSignature(f"receipt {rid} is signed by key {key.kid}, which the card at "
                           f"{url} (key {named.kid}) does not lead from")
    try:
        verify_receipt(receipt, key)
    except BadSignature as exc:
        raise BadSignature(f"receipt {rid}: {exc}") from None
    _names_its_card(rid, claims, url, card)
    return key


def _names_its_card(rid: Any, claims: Mapping[str, Any], url: str,
                    card: Mapping[str, Any]) -> None:
    """A signer can sign any claim: the receipt's ``agent`` must be the agent the signing
    card names, and its ``url`` where that card says the agent is."""
    agent, named = claims.get("agent"), claimed_agent(card)
    if named is None:
        raise BadSignature(f"the card at {url} names no agent id, so receipt {rid} cannot "
                           "be held to one")
    if not isinstance(agent, str) or agent_key(agent) != agent_key(named):
        raise BadSignature(f"receipt {rid} claims to be agent {agent!r}, but the card whose "
                           f"key signed it (at {url}) is agent {named!r}'s")
    base = url.rstrip("/")
    if not any(i.url == base or i.url.startswith(base + "/")
               for i in offered_interfaces(card)):
        raise BadSignature(f"receipt {rid} names {url}, which the card read there does not "
                           "name as its agent's")


def _path(claims: Mapping[str, Any], logged: bool) -> list[str] | None:
    """The delegation path a receipt records: its task's caller chain, as names compare.
    None for a receipt of the per-task form made before receipts recorded it (they were
    all of that form): nothing to hold it to. Every logged receipt records one."""
    if "chain" not in claims and not logged:
        return None
    chain = claims.get("chain")
    if not isinstance(chain, list) or not all(isinstance(a, str) for a in chain):
        raise BadSignature(f"receipt {claims.get('receipt_id')} records no delegation path "
                           "(chain)")
    return [agent_key(a) for a in chain]


async def verify_receipts(task: Mapping[str, Any], card_of: CardFetcher) -> Receipt:
    """The verified tree of ``task`` (a task as Butler /v2 answers it), or
    ``BadSignature`` naming the first thing that does not check."""
    receipts = task.get("receipts")
    if not isinstance(receipts, list) or not receipts:
        raise BadSignature("the task carries no receipts")
    found: dict[str, Receipt] = {}
    cards: dict[str, tuple[PublicKey, Mapping[str, Any]]] = {}
    for jws in receipts:
        claims = receipt_claims(jws)
        rid = claims.get("receipt_id")
        if not isinstance(rid, str) or rid in found:
            raise BadSignature(f"receipt id {rid!r} is missing or repeated")
        key = await _signer(jws, claims, card_of, cards)
        found[rid] = Receipt(claims, key.kid, logged=jws.startswith("{"))
    root = next(iter(found.values()))
    _check_root(root, task)
    seen = {root.claims["receipt_id"]}
    pending = [root]
    while pending:
        node = pending.pop()
        children = node.claims.get("children") or []
        if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
            raise BadSignature(f"receipt {node.claims['receipt_id']}: children is not a list "
                               "of receipt ids")
        for child_id in children:
            child = found.get(child_id)
            if child is None or child_id in seen:
                raise BadSignature(f"receipt {node.claims['receipt_id']} lists child "
                                   f"{child_id}, which is {'repeated' if child else 'missing'}")
            if child.claims.get("trace_id") != root.claims.get("trace_id"):
                raise BadSignature(f"receipt {child_id} is of another trace")
            below_path, own_path = child.path, node.path
            if below_path is not None and own_path is not None and \
                    below_path != [*own_path, agent_key(node.claims["agent"])]:
                raise BadSignature(
                    f"receipt {child_id} ({child.claims['agent']}) was not delegated by "
                    f"{node.claims['agent']}: its path is {child.claims['chain']}, "
                    f"{node.claims['agent']}'s is {node.claims['chain']}")
            seen.add(child_id)
            node.children.append(child)
            pending.append(child)
        below = sum((_money(c.claims, "total_usd") for c in node.children), Decimal("0"))
        if _money(node.claims, "total_usd") < _money(node.claims, "cost_usd") + below:
            raise BadSignature(f"receipt {node.claims['receipt_id']}: its total is less than "
                               "its own cost and its children's totals")
    if left := set(found) - seen:
        raise BadSignature(f"receipts outside the tree: {', '.join(sorted(left))}")
    return root


def _check_root(root: Receipt, task: Mapping[str, Any]) -> None:
    claims = root.claims
    rid = claims.get("receipt_id")
    swarm = task.get("swarm")
    chain = swarm.get("caller_chain") if isinstance(swarm, dict) else None
    path = root.path
    if isinstance(chain, list) and path is not None and \
            path != [agent_key(str(a)) for a in chain]:
        raise BadSignature(f"receipt {rid} records the path {claims.get('chain')}, the task "
                           f"{chain}")
    if claims.get("task_id") != task.get("id"):
        raise BadSignature(f"receipt {rid} is of task {claims.get('task_id')}, not "
                           f"{task.get('id')}")
    if claims.get("state") != task.get("state"):
        raise BadSignature(f"receipt {rid} says {claims.get('state')}, the task "
                           f"{task.get('state')}")
    result = task.get("result")
    result = result if isinstance(result, dict) else {}
    if any(not isinstance(result.get(k) or [], list) for k in ("parts", "artifacts")):
        raise BadSignature(f"receipt {rid}: the task's result is not parts and artifacts")
    if claims.get("digest") != result_digest(result):
        raise BadSignature(f"receipt {rid}: the task's result is not the one signed")
