"""The garbage collector, kept off the request path of a long-running server."""

from __future__ import annotations

import gc


def settle_heap() -> None:
    """Call once started, before serving.

    Everything built while starting lives as long as the process: frozen, full
    collections no longer scan it (one took about 26 ms, several times a minute under
    load, and every request in flight waited). Young collections start after 10,000
    net new objects rather than 700: requests in flight alone crossed 700 about a
    hundred times a second, costing about 4 % of the CPU (docs/performance.md).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
