"""Property tests: budgets never grow down a chain, and spent + left == start."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from butler.config.model import SkillConfig
from butler.delegation.peers import DelegationPlan, PeerStatus
from butler.engine.engine import TaskEngine
from butler.engine.run import RunDeps
from butler.engine.store import SqliteTaskStore
from butler.routing import RouteCandidate
from butler.skills.base import DelegationResult
from butler.skills.catalog import Skill, SkillCatalog
from butler.skills.plugin import load_plugin
from butler.swarm.decision import SwarmPolicy
from butler.swarm.spend import BudgetLedger
from internal.protocol.a2a.client import PeerTracking
from internal.protocol.a2a.model import (
    AuthError,
    CostNode,
    Envelope,
    Identity,
    PeerTask,
    Refusal,
    TaskRequest,
    TaskState,
)

money = st.decimals(min_value=0, max_value=10, places=2, allow_nan=False, allow_infinity=False)
ids = st.sampled_from(["a", "b", "c", "d", "home", "office", "x1", "y2"])


@given(start=money, ops=st.lists(st.tuples(money, money), max_size=30))
def test_ledger_never_overgrants_and_balances(
    start: Decimal, ops: Sequence[tuple[Decimal, Decimal]]
) -> None:
    ledger = BudgetLedger(start)
    for want, actual in ops:
        left = ledger.left
        try:
            grant = ledger.reserve(want, "x")
        except Refusal:
            assert want > left
            continue
        assert grant <= left
        ledger.settle(grant, actual)
        assert ledger.spent + ledger.left == start
        assert ledger.left >= 0


@given(chain=st.lists(ids, max_size=8), claimed=st.none() | money, cap=money,
       max_depth=st.integers(0, 6), bound=st.booleans())
def test_admission_decides_by_the_rules(
    chain: list[str], claimed: Decimal | None, cap: Decimal, max_depth: int, bound: bool
) -> None:
    policy = SwarmPolicy("home", max_depth, cap)
    caller = Identity("office", bound=bound)
    try:
        admitted = policy.admit(Envelope(chain=tuple(chain), budget_usd=claimed), caller)
    except AuthError as err:
        assert err.code == "chain_mismatch"
        assert bound and chain and chain[-1] != "office"
        return
    except Refusal as err:
        effective = chain or (["office"] if bound else [])
        if err.code == "loop_detected":
            assert "home" in effective
        else:
            assert err.code == "depth_exceeded" and len(effective) > max_depth
        return
    assert "home" not in admitted.chain
    assert admitted.depth <= max_depth
    assert admitted.budget_usd == (cap if claimed is None else min(cap, claimed))
    if bound:
        assert admitted.chain[-1] == "office"


class FakeDelegator:
    """A peer that spends a scripted share of whatever it is granted."""

    def __init__(self, shares: Sequence[Decimal]) -> None:
        self.shares = list(shares)
        self.grants: list[tuple[Decimal, Decimal]] = []

    async def plan(self, capabilities: Sequence[str], chain: Sequence[str],
                   peer: str | None = None, skill: str | None = None) -> DelegationPlan:
        return DelegationPlan((), tuple(capabilities), peer, skill)

    async def delegate(self, *, plan: DelegationPlan, request: TaskRequest,
                       chain: tuple[str, ...], budget: Decimal, deadline: float,
                       parent_task_id: str = "", tree_id: str = "",
                       tracking: PeerTracking | None = None) -> DelegationResult:
        share = self.shares.pop(0) if self.shares else Decimal("0")
        spent = (budget * share).quantize(Decimal("0.01")).min(budget)
        self.grants.append((budget, spent))
        return DelegationResult(
            peer="office", task_id="t", state="completed", parts=(), artifacts=(),
            spent_usd=spent, cost=CostNode("office", "w", spent, 1, "completed"))

    async def resume(self, *, peer_task: PeerTask, request: TaskRequest,
                     chain: tuple[str, ...], budget: Decimal, deadline: float,
                     parent_task_id: str = "", tracking: PeerTracking | None = None,
                     reattach: bool = False) -> DelegationResult:
        raise AssertionError("this peer never asks its caller")

    def abandon(self, peer_task: PeerTask) -> None:
        raise AssertionError("this peer never asks its caller")

    async def route_candidates(self, text: str = "") -> tuple[RouteCandidate, ...]:
        return ()

    async def peer_status(self) -> list[PeerStatus]:
        return []

    async def aclose(self) -> None:
        return None


@settings(max_examples=40, deadline=None)
@given(start=money, skill_cost=money, children=st.integers(0, 6),
       shares=st.lists(st.decimals(min_value=0, max_value=1, places=2), max_size=6))
def test_a_task_run_balances_its_budget(
    start: Decimal, skill_cost: Decimal, children: int, shares: list[Decimal]
) -> None:
    asyncio.run(_run_fan_out(start, skill_cost, children, shares))


async def _run_fan_out(start: Decimal, skill_cost: Decimal, children: int,
                       shares: list[Decimal]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = await SqliteTaskStore.open(Path(tmp) / "tasks.db")
        fake = FakeDelegator(shares)
        cfg = SkillConfig(id="fan", name="fan", capabilities=("fan",), cost_usd=skill_cost,
                          expose=True, python="tests.plugins.fanout:fan_out")
        engine = TaskEngine(
            RunDeps(agent_id="home", max_children=10), store=store,
            catalog=SkillCatalog([Skill(cfg, load_plugin(cfg.python or ""))], None),
            policy=SwarmPolicy("home", 4, Decimal("100")), delegator=fake,
            retention_hours=1, default_timeout=30, card=lambda _: {})
        await engine.start()
        try:
            caller = Identity("operator")
            request = TaskRequest(text="go", skill="fan",
                                  input={"children": children, "capability": "w"})
            try:
                task = await engine.submit(caller, request, Envelope(budget_usd=start))
            except Refusal as err:
                assert err.code == "budget_exhausted" and skill_cost > start
                return
            assert task.state is TaskState.COMPLETED, task.error
            assert task.budget is not None and task.cost is not None
            assert task.budget.spent_usd + task.budget.left_usd == start
            assert task.budget.spent_usd == task.cost.total_usd
            left = start - skill_cost
            for grant, spent in fake.grants:
                assert grant <= left  # a child never receives more than its parent has left
                left -= spent
            assert task.budget.left_usd == left
            assert task.budget.left_usd >= 0
        finally:
            await engine.stop(1)
            await store.close()
