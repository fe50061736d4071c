"""Audit retention: sealed segments older than ``audit.retention_days`` are exported to
``<data_dir>/audit-archive`` and dropped from the live log (``segments.retire``), every
tenth of the retention (at most hourly). Off (0) by default: the log is then kept whole."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

from butler.audit.log import AuditLog
from butler.audit.segments import export_in_child, retire

log = logging.getLogger("butler.audit")

ARCHIVE = "audit-archive"


async def retention_loop(audit: AuditLog, retention_days: float, archive: Path) -> None:
    """Runs until cancelled; the work runs in a thread, each page a job on the audit
    database's worker, and each segment's export in a child process, so the loop and
    the appends go on meanwhile."""
    failures = 0
    every = min(3600.0, max(retention_days * 86400 / 10, 1.0))
    while True:
        try:
            before = datetime.now(UTC) - timedelta(days=retention_days)
            written = await asyncio.to_thread(retire, audit, before, archive,
                                              export_in_child)
            if written:
                log.info("audit: exported and dropped %d segment(s) past retention into %s",
                         len(written), archive)
        except Exception:
            failures += 1
            log.exception("audit retention failed (%d time(s) so far)", failures)
        await asyncio.sleep(every)
