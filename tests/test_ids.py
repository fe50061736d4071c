"""Ids: unique, a forked child never repeats its parent's, task ids ordered by time."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from butler.runtime.ids import IDS


def drawn_in_a_child(draw: Callable[[], str]) -> str:
    """What ``draw`` returns in a forked child (whose parent had drawn before)."""
    draw()  # the parent's generator is seeded before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id, then leave without cleanup
        try:
            os.write(write, draw().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    return child


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    child = drawn_in_a_child(IDS.hex128)
    parent = IDS.hex128()
    assert len(child) == len(parent) == 32
    assert child != parent


def test_a_forked_child_draws_other_ordered_ids_than_its_parent() -> None:
    # The random part: the time part may well be the same millisecond.
    child = drawn_in_a_child(lambda: IDS.ordered128()[12:])
    assert child != IDS.ordered128()[12:]


def test_task_ids_start_with_their_creation_time_so_later_ids_sort_after() -> None:
    before = time.time_ns() // 1_000_000
    first = IDS.ordered128()
    while time.time_ns() // 1_000_000 <= int(first[:12], 16):
        pass  # until the clock shows a later millisecond (at most one)
    second = IDS.ordered128()
    after = time.time_ns() // 1_000_000
    assert len(first) == len(second) == 32
    assert all(c in "0123456789abcdef" for c in first + second)
    assert before <= int(first[:12], 16) <= int(second[:12], 16) <= after
    assert first < second


def test_ids_made_in_the_same_millisecond_still_differ() -> None:
    ids = [IDS.ordered128() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)

