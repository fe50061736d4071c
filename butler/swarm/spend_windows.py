"""One caller's tasks and USD per minute, summed over rolling windows (the last hour, the
last day), and when a window will have room again.

A minute counts in a window of ``span`` minutes while ``now_minute - span < minute``: a
rolling window of whole minutes, so a cap is kept over any 60 (or 1440) minutes, at the
cost of up to one minute of extra wait. A running task's reservation sits in the minute it
was admitted, and is replaced there by what it spent once it ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

SECONDS = 60
HOUR = 60  # minutes
DAY = 1440


@dataclass(slots=True)
class Usage:
    usd: Decimal
    tasks: int


class Windows:
    def __init__(self) -> None:
        self.minutes: dict[int, Usage] = {}

    def add(self, minute: int, usd: Decimal, tasks: int) -> Usage:
        """Adds to ``minute``; returns its new total (what is stored)."""
        bucket = self.minutes.setdefault(minute, Usage(Decimal("0"), 0))
        bucket.usd += usd
        bucket.tasks += tasks
        return bucket

    def total(self, now_minute: int, span: int) -> Usage:
        usd, tasks = Decimal("0"), 0
        for minute, bucket in self.minutes.items():
            if minute > now_minute - span:
                usd += bucket.usd
                tasks += bucket.tasks
        return Usage(usd, tasks)

    def prune(self, now_minute: int) -> None:
        """Forget minutes no window counts any more."""
        for minute in [m for m in self.minutes if m <= now_minute - DAY]:
            del self.minutes[minute]

    def frees_at(self, now_minute: int, span: int, *, usd: Decimal | None = None,
                 strictly: bool = False, tasks: int | None = None) -> int:
        """The first minute at which at least ``usd`` (more than it, ``strictly``) or at
        least ``tasks`` will have left the window, as its oldest minutes leave it."""
        freed_usd, freed_tasks = Decimal("0"), 0
        for minute in sorted(m for m in self.minutes if m > now_minute - span):
            freed_usd += self.minutes[minute].usd
            freed_tasks += self.minutes[minute].tasks
            if (usd is not None and (freed_usd > usd or (freed_usd == usd and not strictly))) or \
                    (tasks is not None and freed_tasks >= tasks):
                return minute + span
        return now_minute + span  # not reached: everything in it will have left by then
