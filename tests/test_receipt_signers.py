"""Receipts name their real signer (docs/receipts.md#butler-receipt-verify): a receipt's
``agent`` and ``url`` must be those of the card whose key signed it, and each receipt of
a tree must have been delegated by its parent (the path it records is its parent's, then
its parent). A hostile peer forging an "office, cost 3.00" receipt with its own key is
refused, however it names the forged signer."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from butler.identity.key_file import load_identity
from butler.identity.receipt_check import verify_receipts
from butler.identity.receipts import (
    RECEIPT_TYPE,
    Sealing,
    receipt_claims,
    sealing,
    signed_receipt,
    task_digest,
)
from butler.runtime.ids import IDS
from internal.protocol.a2a.model import CostNode, TaskRequest, TaskState
from internal.protocol.a2a.model import Task as TaskModel
from internal.signing import BadSignature, canonical, sign_jws
from tests.delegation_support import Mesh, skill
from tests.support import Instance, run_cli
from tests.test_receipts import card_reader, three_hops


def forging(evil: Instance, claimed: str, claimed_url: str) -> Any:
    """The hostile peer's sealing: beside its own receipt, one it signed with its own key
    for ``claimed`` at ``claimed_url``, "cost 3.00", as the child it delegated to, and a
    cost tree that adds up to it."""
    identity = load_identity(evil.daemon.config.data_dir)

    def seal_forged(task: TaskModel) -> Sealing:
        claims = {
            "receipt_id": "r-" + IDS.hex128(), "agent": claimed, "url": claimed_url,
            "task_id": IDS.hex128(), "state": "completed", "digest": task_digest(task),
            "cost_usd": "3.00", "total_usd": "3.00", "spent_usd": "3.00",
            "budget_left_usd": "0", "trace_id": task.trace_id,
            "chain": [*task.chain, evil.agent_id], "children": [], "at": task.updated_at}
        forged = signed_receipt(claims, identity.key)
        cost = CostNode(evil.agent_id, task.skill, Decimal("0"), 1, task.state.value, (
            CostNode(claimed, "work", Decimal("3.00"), 1, "completed"),))
        return sealing(replace(task, receipts=(forged, *task.receipts), cost=cost),
                       evil.agent_id, evil.url)

    return seal_forged


async def home_and_evil(mesh: Mesh) -> dict[str, Instance]:
    mesh.agent("home", skills=[])
    mesh.agent("evil", skills=[skill("x.work")])
    mesh.agent("office", skills=[skill("x.work")])
    mesh.link("home", "evil", ["x.work"])
    return dict(await mesh.start())


@pytest.mark.parametrize("at", ["its own url", "office's url"])
async def test_a_forged_office_receipt_is_refused(mesh: Mesh, at: str) -> None:
    agents = await home_and_evil(mesh)
    home, evil, office = agents["home"], agents["evil"], agents["office"]
    evil.daemon.engine.deps.seal = forging(evil, "office",
                                           evil.url if at == "its own url" else office.url)
    task = await home.client().submit(TaskRequest(text="w", capabilities_needed=("x.work",)))
    assert task.state is TaskState.COMPLETED, task.error
    async with mesh.session.get(f"{home.url}/v2/tasks/{task.id}",
                                headers=home.headers()) as resp:
        raw: dict[str, Any] = await resp.json()
    claims = [receipt_claims(r) for r in raw["receipts"]]
    assert [c["agent"] for c in claims] == ["home", "evil", "office"]
    assert claims[0]["total_usd"] == "3.00"  # the forgery adds up: only its signer is wrong
    with pytest.raises(BadSignature) as refused:
        await verify_receipts(raw, card_reader(mesh.session))
    if at == "its own url":
        assert "claims to be agent 'office', but the card whose key signed it" in str(
            refused.value) and "is agent 'evil''s" in str(refused.value)
    else:
        assert "which the card at" in str(refused.value)  # office's card names office's key
    code, out, err = await run_cli("receipt", "verify", home.url, task.id,
                                   token=home.tokens["operator"])
    assert code == 1 and "verified" not in out, out
    assert err.startswith("butler: receipt_invalid: "), err


def resigned(raw: dict[str, Any], at: int, key: Any, **changes: Any) -> dict[str, Any]:
    """``raw`` with receipt ``at`` re-signed by ``key`` with its claims changed."""
    case = copy.deepcopy(raw)
    claims = {**receipt_claims(raw["receipts"][at]), **changes}
    for name in [k for k, v in changes.items() if v is None]:
        del claims[name]
    case["receipts"][at] = sign_jws(key, canonical(claims),
                                    {"typ": RECEIPT_TYPE, "jwk": key.public.jwk})
    return case


async def test_a_tree_must_follow_its_delegation_path(mesh: Mesh) -> None:
    """c signs, with its own key and as itself, receipts that put it elsewhere in the
    tree: each is refused, since the path it records is not the one its parent took. (A
    receipt of the per-task form with no path at all, as Butlers made before receipts
    recorded one, claims no place: tests/test_receipt_log.py.)"""
    raw, agents = await three_hops(mesh)
    card_of = card_reader(mesh.session)
    await verify_receipts(raw, card_of)  # as it came: whole
    c_key = load_identity(agents["c"].daemon.config.data_dir).key
    a_chain = receipt_claims(raw["receipts"][0])["chain"]
    b_claims = receipt_claims(raw["receipts"][1])
    assert b_claims["chain"] == [*a_chain, "a"]
    assert receipt_claims(raw["receipts"][2])["chain"] == [*a_chain, "a", "b"]
    for changes, why in (({"chain": [*a_chain, "a"]}, "was not delegated by b"),
                         ({"chain": [*a_chain, "x", "b"]}, "was not delegated by b"),
                         ({"chain": "a,b"}, "records no delegation path")):
        with pytest.raises(BadSignature, match=why):
            await verify_receipts(resigned(raw, 2, c_key, **changes), card_of)
    # The root's path is the task's own chain.
    a_key = load_identity(agents["a"].daemon.config.data_dir).key
    with pytest.raises(BadSignature, match="records the path"):
        await verify_receipts(resigned(raw, 0, a_key, chain=["someone"]), card_of)


async def test_the_card_names_the_agent_its_receipts_name(mesh: Mesh) -> None:
    mesh.agent("solo", skills=[skill("x.work")])
    (solo,) = (await mesh.start()).values()
    async with mesh.session.get(solo.url + "/.well-known/agent-card.json") as resp:
        card = json.loads(await resp.text())
    (ext,) = [e for e in card["capabilities"]["extensions"]
              if e["uri"] == "urn:butler:a2a:ext:swarm:v1"]
    assert ext["params"]["agentId"] == "solo"
