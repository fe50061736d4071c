"""Ids: a forked child never repeats its parent's ids."""

from __future__ import annotations

import os

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
