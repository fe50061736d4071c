"""Terminal tasks past their retention leave the store, every tenth of the retention
(at least every second, at most every hour); what belongs to them goes with them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from butler.engine.store import TaskStore
from butler.runtime.clock import iso_before

log = logging.getLogger("butler.engine")

PurgeListener = Callable[[list[str]], Awaitable[None]]


async def purge_loop(store: TaskStore, retention_seconds: float,
                     listeners: Sequence[PurgeListener]) -> None:
    """Runs until cancelled; a failed round is logged and counted, and the next one tries
    again."""
    failures = 0
    while True:
        try:
            purged = await store.purge_terminal(iso_before(retention_seconds))
            if purged:
                log.info("purged %d terminal task(s) past retention", len(purged))
                for listener in listeners:
                    await listener(purged)
        except Exception:
            failures += 1
            log.exception("task purge failed (%d time(s) so far)", failures)
        await asyncio.sleep(min(3600.0, max(retention_seconds / 10, 1.0)))
