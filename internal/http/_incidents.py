"""Hostile-client incidents, logged at most once per class per interval.

A flood (hundreds of idle connections, a burst past the connection cap) is one event
for the operator, not hundreds of log lines. The first incident of a class is logged
with its details; the rest of that interval are only counted, and one summary line
with the count is logged when the interval ends. ``totals`` keeps every count.
``QuietRefusals`` holds other loggers' refusal lines to the same rule.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable

from aiohttp import web

SLOW_HEADERS = "slow_headers"
SLOW_BODY = "slow_body"
CONNECTION_CAP = "connection_cap"
MALFORMED_HTTP = "malformed_http"
ACCEPT_FAILED = "accept_failed"


class IncidentLog:
    def __init__(self, logger: logging.Logger, *, interval: float = 60.0) -> None:
        self.interval = interval
        self.totals: Counter[str] = Counter()
        self._logger = logger
        self._quiet_until: dict[str, float] = {}
        self._suppressed: Counter[str] = Counter()
        self._summaries: dict[str, asyncio.TimerHandle] = {}

    def report(self, kind: str, detail: str) -> None:
        """One incident. Details name addresses and limits, never request bytes."""
        if self.admit(kind):
            self._logger.warning("%s: %s", kind, detail)

    def admit(self, kind: str) -> bool:
        """Whether an incident of ``kind`` is logged now (the first of its interval); if
        not, it is counted for the interval's summary line."""
        self.totals[kind] += 1
        now = time.monotonic()
        quiet_until = self._quiet_until.get(kind)
        if quiet_until is None or now >= quiet_until:
            self._quiet_until[kind] = now + self.interval
            return True
        self._suppressed[kind] += 1
        if kind not in self._summaries:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop: the count goes out with close()
                return False
            self._summaries[kind] = loop.call_later(quiet_until - now, self._summarise, kind)
        return False

    def _summarise(self, kind: str) -> None:
        self._summaries.pop(kind, None)
        count = self._suppressed.pop(kind, 0)
        if count:
            # The summary opens a new interval: a steady flood gives one line per interval.
            self._quiet_until[kind] = time.monotonic() + self.interval
            self._logger.warning("%s: %d more in the last %gs (logged once per interval)",
                                 kind, count, self.interval)

    def close(self) -> None:
        """Log the pending summaries now (at shutdown)."""
        for kind, handle in list(self._summaries.items()):
            handle.cancel()
            self._summarise(kind)
        for kind in list(self._suppressed):
            self._summarise(kind)


class QuietRefusals(logging.Filter):
    """The incident log's rule for other loggers' refusal lines (a refused task, a session
    the MCP SDK does not know, a failed gRPC call): per reason, the first line of an
    interval passes, the rest are counted into the incident log's summary line. So no
    client can make the log grow by more than two lines per reason per interval.

    ``reason``: a record's reason, or None for a line that is not a refusal (it passes)."""

    def __init__(self, incidents: IncidentLog,
                 reason: Callable[[logging.LogRecord], str | None]) -> None:
        super().__init__()
        self._incidents = incidents
        self._reason = reason

    def filter(self, record: logging.LogRecord) -> bool:
        reason = self._reason(record)
        return reason is None or self._incidents.admit(f"{record.name}: {reason}")


INCIDENTS = web.AppKey("butler.incidents", IncidentLog)


def report(app: web.Application, kind: str, detail: str) -> None:
    """Report through the app's incident log, if it has one."""
    incidents = app.get(INCIDENTS)
    if incidents is not None:
        incidents.report(kind, detail)
