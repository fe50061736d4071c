"""Ids for tasks, contexts and traces: unique, not secret.

A task id grants nothing (a caller only ever sees its own tasks), so these come from a
generator seeded once from the OS: asking the OS for every id would put a system call on
the event loop for a secrecy no id needs.

Task and context ids start with their creation time, so each new row lands at the end of
the task store's indexes instead of on a random page: a group commit then writes a few
index pages instead of one per task.
"""

from __future__ import annotations

import os
import random
import time


class IdSource:
    """Seeded on first use, and again in a forked child, which must not repeat ids."""

    def __init__(self) -> None:
        self._rng: random.Random | None = None
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._rng = None

    def _source(self) -> random.Random:
        # Not ``os.getpid()`` per id: it is a system call each time.
        if self._rng is None:
            self._rng = random.Random(os.urandom(32))  # noqa: S311 -- ids, not secrets
        return self._rng

    def hex128(self) -> str:
        return f"{self._source().getrandbits(128):032x}"

    def ordered128(self) -> str:
        """32 hex digits: milliseconds since the epoch (12 digits), then 80 random bits.
        Later ids sort after earlier ones, except within one millisecond."""
        return f"{time.time_ns() // 1_000_000:012x}{self._source().getrandbits(80):020x}"

    def span_id(self) -> int:
        return self._source().getrandbits(64) or 1


IDS = IdSource()
