"""Ids: unique, a forked child never repeats its parent's, task ids ordered by time."""

from __future__ import annotations

import os
import time

from butler.ids import IDS


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    IDS.hex128()  # the parent's generator is seeded before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id, then leave without cleanup
        try:
            os.write(write, IDS.hex128().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    parent = IDS.hex128()
    assert len(child) == len(parent) == 32
    assert child != parent


def test_task_ids_start_with_their_creation_time_so_later_ids_sort_after() -> None:
    before = time.time_ns() // 1_000_000
    first = IDS.ordered128()
    time.sleep(0.003)
    second = IDS.ordered128()
    after = time.time_ns() // 1_000_000
    assert len(first) == len(second) == 32
    assert all(c in "0123456789abcdef" for c in first + second)
    assert before <= int(first[:12], 16) <= int(second[:12], 16) <= after
    assert first < second


def test_ids_made_in_the_same_millisecond_still_differ() -> None:
    ids = [IDS.ordered128() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)


def test_a_forked_child_draws_other_ordered_ids_than_its_parent() -> None:
    IDS.ordered128()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, IDS.ordered128()[12:].encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    assert child != IDS.ordered128()[12:]
