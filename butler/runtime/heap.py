"""The process's heap: the collector kept off the request path, and memory given back to
the OS once the daemon goes quiet after a burst.

``settle_heap`` runs once, before serving. ``HeapKeeper`` runs beside the daemon (``butler
serve``): what a burst's peak took stays with the allocators after it (pymalloc's arenas,
glibc's free heap), reused by the next burst but counted in RSS until then.

- When: the daemon's load (requests in flight, running tasks, open connections: counts
  its pools keep anyway) is sampled once every ``SAMPLE_SECONDS``, so a request pays
  nothing. A sample of at least ``BURST_LOAD`` is a burst; once every sample has been at
  most an eighth of the burst's peak for ``QUIET_SECONDS``, the heap is given back once,
  and the next burst starts over. Never during a burst: a busy sample restarts the quiet.
- What: a full collection (the burst's cyclic garbage, which a quiet daemon makes no new
  objects to collect), then glibc's ``malloc_trim(0)``, which returns the free pages of
  every malloc arena (the worker threads' included); on another C library, the
  collection alone. The collection on the loop's thread: it holds the GIL throughout
  wherever it runs, and what it frees is finalized where it runs (``__del__``, a dropped
  coroutine's ``finally``, which may give a pool's place back), which must not be beside
  the loop. The trim in a worker thread: ctypes lets go of the GIL while glibc trims.
- Not done: a cap on glibc's arenas (``M_ARENA_MAX``) kept no less after a burst, and
  pymalloc's arenas cannot be given back while any object in them lives: each holds a
  few of the long-lived objects made during the burst. bench/HISTORY.md has the
  measurements.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import time
from collections.abc import Callable
from functools import partial

log = logging.getLogger("butler.heap")

SAMPLE_SECONDS = 1.0
QUIET_SECONDS = 5.0
BURST_LOAD = 32  # a load below it leaves too little behind to be worth a collection
MallocTrim = Callable[[int], int]


def settle_heap() -> None:
    """Call once started, before serving.

    Everything built while starting lives as long as the process: frozen, full
    collections no longer scan it, and no request in flight waits for such a scan.
    Young collections start after 10,000 net new objects rather than 700, which the
    objects of the requests in flight alone cross many times a second.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def c_library() -> str | None:
    """The C library's name and version as glibc reports it ("glibc 2.36"); None where
    it is another (musl, macOS)."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        return None


def malloc_trim(library: str | None) -> MallocTrim | None:
    """glibc's ``malloc_trim`` when ``library`` (``c_library()``) is glibc; else None."""
    if not library or not library.startswith("glibc"):
        return None
    trim = ctypes.CDLL(None).malloc_trim
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def give_memory_back(trim: MallocTrim | None) -> int:
    """A full collection, then the C heap's free pages back to the OS where ``trim``
    (``malloc_trim``) is there. Returns how many objects the collection freed."""
    freed = gc.collect()
    trim_heap(trim)
    return freed


def trim_heap(trim: MallocTrim | None) -> int:
    """The C heap's free pages back to the OS where ``trim`` (``malloc_trim``) is there;
    0 elsewhere. Safe off the loop: it runs no Python code."""
    return trim(0) if trim is not None else 0


class HeapKeeper:
    """Gives memory back once ``load`` has stayed low for ``quiet_seconds`` after a burst.

    ``clock`` and ``give_back`` are for tests: a clock they move, and what runs in a worker
    thread after the collection (glibc's trim) replaced by one that records where it ran."""

    def __init__(self, load: Callable[[], int], *,
                 clock: Callable[[], float] = time.monotonic,
                 give_back: Callable[[], int] | None = None,
                 burst: int = BURST_LOAD, quiet_seconds: float = QUIET_SECONDS) -> None:
        self._load = load
        self._clock = clock
        self._give_back = give_back or partial(trim_heap, malloc_trim(c_library()))
        self._burst = burst
        self._quiet_seconds = quiet_seconds
        self._peak = 0  # the highest load since memory was last given back
        self._quiet_since: float | None = None

    async def run(self) -> None:
        """Until cancelled, or until a sample fails: that is a defect, logged once, not
        once a second for as long as the daemon runs."""
        while True:
            try:
                await self.check()
            except Exception:
                log.exception("giving memory back failed; memory a burst takes now stays "
                              "with the allocators until the daemon restarts")
                return
            await asyncio.sleep(SAMPLE_SECONDS)

    async def check(self) -> bool:
        """Sample the load once; give memory back (off the loop) when a burst has been
        quiet long enough. True when it did."""
        load = self._load()
        if not self._quiet_after_burst(load, self._clock()):
            return False
        peak, self._peak, self._quiet_since = self._peak, 0, None
        freed = gc.collect()  # here, not in the thread: see the module's docstring
        await asyncio.to_thread(self._give_back)
        log.debug("quiet after a burst (a load of %d, %d now): memory given back to the "
                  "OS, %d objects collected", peak, load, freed)
        return True

    def _quiet_after_burst(self, load: int, now: float) -> bool:
        self._peak = max(self._peak, load)
        if self._peak < self._burst or load * 8 > self._peak:
            self._quiet_since = None
            return False
        if self._quiet_since is None:
            self._quiet_since = now
        return now - self._quiet_since >= self._quiet_seconds
