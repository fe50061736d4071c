"""Property test: whatever callers ask, in whatever order tasks end and time passes, a
caller's windows (spent plus reserved) never exceed its caps, on a real ``spend.db``."""

from __future__ import annotations

import asyncio
import tempfile
from decimal import Decimal
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from butler.config.model import CallerLimits
from butler.swarm.spend import SpendBook
from internal.protocol.a2a.model import Budget, Refusal, Task, TaskRequest, TaskState

money = st.decimals(min_value=0, max_value=3, places=2, allow_nan=False, allow_infinity=False)
LIMITS = CallerLimits(max_tasks_per_hour=6, max_tasks_per_day=10, max_usd_per_task=Decimal("1"),
                      max_usd_per_hour=Decimal("2"), max_usd_per_day=Decimal("3.5"))
ops = st.lists(st.one_of(
    st.tuples(st.just("admit"), money, money),  # claimed budget, what the work costs
    st.tuples(st.just("end"), st.integers(0, 20), money),  # which running task, what it spent
    st.tuples(st.just("wait"), st.integers(1, 30 * 60), st.just(Decimal("0"))),  # seconds
), max_size=40)


def ended(task_id: str, start: Decimal, spent: Decimal) -> Task:
    return Task(id=task_id, context_id="c", owner="m", state=TaskState.COMPLETED,
                request=TaskRequest(), created_at="", updated_at="",
                budget=Budget(start, min(spent, start)))


@settings(deadline=None)
@given(ops=ops)
def test_windows_never_exceed_the_caps(ops: list[tuple[str, int | Decimal, Decimal]]) -> None:
    asyncio.run(_play(ops))


async def _play(ops: list[tuple[str, int | Decimal, Decimal]]) -> None:
    now = [1_800_000_000.0]
    with tempfile.TemporaryDirectory() as folder:
        book = await SpendBook.open({"m": LIMITS}, Path(folder), lambda: now[0])
        running: list[tuple[str, Decimal]] = []
        try:
            for n, (op, a, b) in enumerate(ops):
                if op == "admit":
                    assert isinstance(a, Decimal)
                    needed = min(a, b)  # the swarm's budget check ran before: it fits
                    try:
                        granted = await book.reserve("m", f"t{n}", a, needed)
                    except Refusal as err:
                        assert err.code == "spend_limit_reached"
                        continue
                    assert needed <= granted <= min(a, Decimal("1"))
                    running.append((f"t{n}", granted))
                elif op == "end" and running:
                    assert isinstance(a, int)
                    task_id, start = running.pop(a % len(running))
                    book.settle(ended(task_id, start, b))
                elif op == "wait":
                    now[0] += float(a)
                [use] = book.usage()
                assert use.hour.usd <= 2 and use.day.usd <= Decimal("3.5")
                assert use.hour.tasks <= 6 and use.day.tasks <= 10
                assert use.running == len(running)
                assert use.reserved_usd == sum((g for _, g in running), Decimal("0"))
        finally:
            await book.close()
