"""Spending, reserved first and then settled to what was spent, at two scopes.

A task's budget (``BudgetLedger``) bounds one tree: what it started with, what is reserved,
what was spent. Invariant: spent + left == start, and a child never receives more than is
left.

A caller's spend caps (``SpendBook``) bound the caller: what one caller identity may spend
and start across all its task trees, over rolling windows of an hour and a day, kept in
``spend.db`` across restarts. At admission (its last step, in the swarm decision, so
nothing after it refuses) the task's budget is clamped to the room the caller has left and
that whole budget is reserved at once, in memory and then in ``spend.db``, before the task
is committed: parallel trees cannot together spend past a cap. When the task ends, the
reservation becomes what it spent. A task cut off (by a crash, a shutdown, a failed write)
keeps its whole reservation: what it spent is not known.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from butler.config.model import CallerLimits
from butler.swarm.spend_store import MinuteRow, OpenRow, SpendStore
from butler.swarm.spend_windows import DAY, HOUR, SECONDS, Usage, Windows
from internal.protocol.a2a.model import Refusal, Task, Unavailable

# Tasks that ended without a known spend: their reservation stands.
CUT_OFF = frozenset({"interrupted_by_restart", "interrupted_by_shutdown", "store_unavailable"})
SPANS = (("hour", HOUR), ("day", DAY))
_ZERO = Decimal(0)  # once: Decimal("0") parses its text at each call, and this is per task


class BudgetLedger:
    def __init__(self, start: Decimal) -> None:
        self.start = start
        self._spent = _ZERO
        self._reserved = _ZERO

    @property
    def spent(self) -> Decimal:
        return self._spent

    @property
    def left(self) -> Decimal:
        """What may still be committed: start minus spent minus reservations."""
        return self.start - self._spent - self._reserved

    def reserve(self, amount: Decimal, what: str) -> Decimal:
        if amount < 0:
            raise ValueError("negative reservation")
        if amount > self.left:
            raise Refusal(
                "budget_exhausted",
                f"{what} needs {amount} USD but only {self.left} USD is left",
                details={"cost_usd": str(amount), "budget_left_usd": str(self.left)},
            )
        self._reserved += amount
        return amount

    def settle(self, reserved: Decimal, actual: Decimal) -> None:
        """Turn a reservation into spending; ``actual`` is clamped to what was reserved."""
        actual = max(_ZERO, min(actual, reserved))
        self._reserved -= reserved
        self._spent += actual


@dataclass(frozen=True, slots=True)
class CallerUsage:
    """One capped caller now: what its windows hold (reservations of running tasks
    included) and its limits."""

    caller: str
    limits: CallerLimits
    hour: Usage
    day: Usage
    running: int  # tasks whose reservation is not settled yet
    reserved_usd: Decimal


def caller_json(name: str, limits: CallerLimits, use: CallerUsage | None) -> dict[str, Any]:
    """One limited caller's grants, limits and windows as JSON (``butler spend --json``
    and the dashboard's overview); amounts in USD as exact decimal strings."""
    def cap(value: Decimal | int | None) -> str | int | None:
        return str(value) if isinstance(value, Decimal) else value

    out: dict[str, Any] = {
        "caller": name, "skills": limits.skills, "capabilities": limits.capabilities,
        "limits": {key: cap(getattr(limits, key)) for key in (
            "max_tasks_per_hour", "max_tasks_per_day", "max_usd_per_task",
            "max_usd_per_hour", "max_usd_per_day")},
    }
    if use is not None:
        out["last_hour"] = {"usd": str(use.hour.usd), "tasks": use.hour.tasks}
        out["last_day"] = {"usd": str(use.day.usd), "tasks": use.day.tasks}
        out["running"] = {"tasks": use.running, "reserved_usd": str(use.reserved_usd)}
    return out


@dataclass(slots=True)
class _Open:
    caller: str
    minute: int
    reserved: Decimal


class SpendBook:
    """``await SpendBook.open(limits, data_dir)``; without a store (no caller has caps, or
    in tests) it checks nothing and records nothing."""

    def __init__(self, limits: Mapping[str, CallerLimits], store: SpendStore | None = None,
                 clock: Callable[[], float] = time.time,
                 rows: list[MinuteRow] | None = None) -> None:
        self.limits = dict(limits)
        self.store = store
        self.clock = clock
        self._windows: dict[str, Windows] = {}
        self._open: dict[str, _Open] = {}
        self._purged = self._now()[1]
        for row in rows or ():
            self._windows.setdefault(row.caller, Windows()).add(row.minute, row.usd, row.tasks)

    @classmethod
    async def open(cls, limits: Mapping[str, CallerLimits], data_dir: Path,
                   clock: Callable[[], float] = time.time) -> SpendBook:
        """Opens ``spend.db`` only when some caller has caps."""
        if not any(lim.caps_spend for lim in limits.values()):
            return cls(limits, clock=clock)
        store = await SpendStore.open(data_dir)
        try:
            rows = await store.recover(int(clock() // SECONDS) - DAY)
        except BaseException:
            await store.close()
            raise
        return cls(limits, store, clock, rows)

    async def relimit(self, limits: Mapping[str, CallerLimits], data_dir: Path) -> None:
        """The callers' limits anew (a config reload): the next admission checks these. The
        first caps on a daemon that had none open ``spend.db``, with what it remembers."""
        if self.store is None and any(lim.caps_spend for lim in limits.values()):
            opened = await SpendBook.open(limits, data_dir, self.clock)
            self.store, self._windows, self._purged = opened.store, opened._windows, opened._purged
        self.limits = dict(limits)

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()

    def _now(self) -> tuple[float, int]:
        now = self.clock()
        return now, int(now // SECONDS)

    # -- reserving -----------------------------------------------------------------

    async def reserve(self, caller: str, task_id: str, budget: Decimal,
                      needed: Decimal) -> Decimal:
        """The budget the task gets: ``budget`` clamped to the caller's room, reserved.
        Refuses (402 ``spend_limit_reached``) when the caller may start no task now, has
        nothing left, or less than ``needed`` (what the plan costs)."""
        limits = self.limits.get(caller)
        if limits is None or not limits.caps_spend or self.store is None:
            return budget
        now, minute = self._now()
        windows = self._windows.setdefault(caller, Windows())
        windows.prune(minute)
        granted = self._room(caller, limits, windows, budget, needed, now, minute)
        bucket = windows.add(minute, granted, 1)
        self._open[task_id] = _Open(caller, minute, granted)
        purge = None
        if minute - self._purged >= HOUR:  # spend.db forgets old minutes now and then
            purge, self._purged = minute - DAY, minute
        try:
            await self.store.reserve(OpenRow(task_id, caller, minute, granted),
                                     MinuteRow(caller, minute, bucket.usd, bucket.tasks), purge)
        except Exception as exc:
            self._open.pop(task_id, None)
            windows.add(minute, -granted, -1)
            raise Unavailable("overloaded", "the spend record could not be written",
                              retry_after=1) from exc
        return granted

    def _room(self, caller: str, limits: CallerLimits, windows: Windows, budget: Decimal,
              needed: Decimal, now: float, minute: int) -> Decimal:
        room = budget
        per_task = limits.max_usd_per_task
        if per_task is not None:
            if needed > per_task:
                raise _refusal(caller, f"the work costs {needed} USD, more than its "
                               f"max_usd_per_task {per_task} USD", "max_usd_per_task", None)
            room = min(room, per_task)
        for name, span in SPANS:
            used = windows.total(minute, span)
            max_tasks = limits.max_tasks_per_hour if span == HOUR else limits.max_tasks_per_day
            if max_tasks is not None and used.tasks >= max_tasks:
                frees = windows.frees_at(minute, span, tasks=used.tasks - max_tasks + 1)
                raise _refusal(caller, f"{used.tasks} tasks started in the last {name}, "
                               f"its max_tasks_per_{name}", f"max_tasks_per_{name}",
                               _wait(frees, now))
            cap = limits.max_usd_per_hour if span == HOUR else limits.max_usd_per_day
            if cap is None:
                continue
            left = cap - used.usd
            if needed > cap:
                raise _refusal(caller, f"the work costs {needed} USD, more than its "
                               f"max_usd_per_{name} {cap} USD", f"max_usd_per_{name}", None)
            if left <= 0 or left < needed:
                # Room again once more than (used - cap + needed) has left the window; a
                # reservation counts in full until its task ends (an upper bound).
                frees = windows.frees_at(minute, span, usd=used.usd - cap + needed,
                                         strictly=not needed)
                raise _refusal(caller, f"{used.usd} USD spent or reserved in the last {name}, "
                               f"{left} USD left of its max_usd_per_{name} {cap} USD"
                               + (f", the work costs {needed} USD" if needed else ""),
                               f"max_usd_per_{name}", _wait(frees, now))
            room = min(room, left)
        return room

    # -- settling ------------------------------------------------------------------

    def settle(self, task: Task) -> None:
        """The task has ended (its one final audit record): its reservation becomes what it
        spent, unless it was cut off."""
        held = self._open.pop(task.id, None)
        if held is None or self.store is None:
            return
        cut_off = task.error is not None and task.error.code in CUT_OFF
        spent = task.budget.spent_usd if task.budget is not None else Decimal("0")
        actual = held.reserved if cut_off else max(Decimal("0"), min(spent, held.reserved))
        windows = self._windows.get(held.caller)
        row = None
        if windows is not None and held.minute in windows.minutes:
            bucket = windows.add(held.minute, actual - held.reserved, 0)
            row = MinuteRow(held.caller, held.minute, bucket.usd, bucket.tasks)
        self.store.settle(task.id, row)

    # -- reading -------------------------------------------------------------------

    def usage(self, open_rows: list[OpenRow] | None = None) -> list[CallerUsage]:
        """Every capped caller, by name. ``open_rows``: the reservations a running daemon
        holds, as the CLI reads them from ``spend.db`` (this book's own otherwise)."""
        _, minute = self._now()
        held = [(o.caller, o.reserved) for o in self._open.values()] if open_rows is None \
            else [(o.caller, o.reserved) for o in open_rows]
        out = []
        for caller, limits in sorted(self.limits.items()):
            if not limits.caps_spend:
                continue
            windows = self._windows.get(caller, Windows())
            mine = [amount for who, amount in held if who == caller]
            out.append(CallerUsage(caller, limits, windows.total(minute, HOUR),
                                   windows.total(minute, DAY), len(mine),
                                   sum(mine, Decimal("0"))))
        return out


def _wait(frees_minute: int, now: float) -> int:
    return max(1, math.ceil(frees_minute * SECONDS - now))


def _refusal(caller: str, why: str, limit: str, retry_after: int | None) -> Refusal:
    details: dict[str, object] = {"limit": limit}
    if retry_after is not None:
        details["retry_after_seconds"] = retry_after
    return Refusal("spend_limit_reached", f"spend limit reached for {caller}: {why}",
                   details=details, retry_after=retry_after)
