"""What the daemon's dashboard reads (docs/operations.md, "A web dashboard"):

- ``GET /v2/overview/tasks``: the newest tasks as the page shows them: who asked, what
  (the text, cut short), when it started and ended, its trace id, its cost tree, and for a
  running delegation the peer and hop it waits on. The same tasks ``GET /v2/tasks`` shows
  the caller: its own, or everyone's for tier ``admin``.
- ``GET /v2/overview`` (tier ``admin``: it names every caller and peer): the peers, each
  with its health now and its delegations' statistics from the audit trail (so they
  survive a restart): median and 95th percentile of the delegation time, errors by code;
  and the spend per caller.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from aiohttp import web

from butler.audit.log import DelegationOutcome
from butler.config.model import CallerLimits
from butler.delegation.peers import PeerStatus
from butler.engine.engine import TaskEngine
from butler.metrics import ButlerMetrics
from butler.swarm.spend import CallerUsage, caller_json
from internal.http import identity_of, json_response
from internal.protocol.a2a.codec.butler_v2 import encode_cost
from internal.protocol.a2a.model import AuthError, RequestError, Task, wire_task_id

OVERVIEW_PATH = "/v2/overview"
TASKS_PATH = "/v2/overview/tasks"
TEXT_CHARS = 200  # of a task's text: the page shows a line, not the document
HISTORY = timedelta(hours=24)  # the window of the peers' statistics
HISTORY_RECORDS = 50_000  # read back at most, however busy the day was
HISTORY_CACHE_SECONDS = 5.0  # the page asks every 2 s; the audit trail is read less often
MAX_TASKS = 200


class Overview:
    def __init__(self, agent_id: str, url: Callable[[], str],
                 peers: Callable[[], Awaitable[list[PeerStatus]]],
                 limits: Callable[[], Mapping[str, CallerLimits]], metrics: ButlerMetrics,
                 engine: TaskEngine) -> None:
        self.agent_id = agent_id
        self.url = url
        self.peers = peers
        self.limits = limits
        self.metrics = metrics
        self.engine = engine
        self._history: tuple[float, dict[str, dict[str, Any]]] = (-math.inf, {})

    def routes(self) -> list[web.RouteDef]:
        return [web.get(OVERVIEW_PATH, self.handle), web.get(TASKS_PATH, self.tasks)]

    async def handle(self, request: web.Request) -> web.Response:
        if not identity_of(request).is_admin:
            raise AuthError("forbidden", "the overview needs a token of tier admin")
        history = await self._peer_history()
        return json_response({"agent": {"id": self.agent_id, "url": self.url()},
                              "peers": [_peer(p, history.get(p.name)) for p in
                                        await self.peers()],
                              "spend": self._spend(self.metrics.spend_usage())})

    async def tasks(self, request: web.Request) -> web.Response:
        text = request.query.get("limit", "50")
        if not text.isdigit() or not 1 <= int(text) <= MAX_TASKS:
            raise RequestError("invalid_request", f"limit must be 1 to {MAX_TASKS}")
        page = await self.engine.list_tasks(identity_of(request), state=None, context_id=None,
                                            cursor=None, limit=int(text))
        return json_response({"tasks": [self._task(t) for t in page.tasks]})

    def _task(self, task: Task) -> dict[str, Any]:
        text = task.request.text
        row: dict[str, Any] = {
            "id": wire_task_id(task.id), "state": task.state.value, "skill": task.skill,
            "caller": task.owner, "chain": list(task.chain),
            "text": text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS - 1] + "…",
            "started_at": task.created_at,
            "ended_at": task.updated_at if task.state.terminal else None,
            "trace_id": task.trace_id,
            "waiting_on": self.metrics.waiting.get(task.id, []),
        }
        if task.error is not None:
            row["error"] = {"code": task.error.code, "message": task.error.message}
        if task.budget is not None:
            row["budget"] = {"start_usd": str(task.budget.start_usd),
                             "spent_usd": str(task.budget.spent_usd)}
        if task.cost is not None:
            row["cost"] = encode_cost(task.cost)
        return row

    async def _peer_history(self) -> dict[str, dict[str, Any]]:
        at, known = self._history
        if time.monotonic() - at < HISTORY_CACHE_SECONDS:
            return known
        since = datetime.now(UTC) - HISTORY
        outcomes = await self.metrics.delegation_history(since, HISTORY_RECORDS)
        known = peer_statistics(outcomes, since)
        self._history = (time.monotonic(), known)
        return known

    def _spend(self, usage: list[CallerUsage]) -> list[dict[str, Any]]:
        """Every caller that spent since the start (from the metrics) or has limits (with
        its rolling windows, from the spend book)."""
        spent = {caller: Decimal(amount) for (caller,), amount
                 in self.metrics.caller_spent.samples()}
        used = {u.caller: u for u in usage}
        limits = self.limits()
        rows = []
        for name in sorted(set(spent) | set(limits)):
            lim = limits.get(name)
            row = caller_json(name, lim, used.get(name)) if lim is not None \
                else {"caller": name}
            row["spent_since_start_usd"] = str(spent.get(name, Decimal("0")))
            rows.append(row)
        return rows


def _peer(p: PeerStatus, history: dict[str, Any] | None) -> dict[str, Any]:
    return {"name": p.name, "url": p.url, "source": p.source,
            "capabilities": list(p.capabilities), "health": p.health, "failures": p.failures,
            "history": history or {"delegations": 0, "median_seconds": None,
                                   "p95_seconds": None, "errors": {}}}


def peer_statistics(outcomes: list[DelegationOutcome],
                    since: datetime) -> dict[str, dict[str, Any]]:
    """Per peer: how many delegations since ``since``, the median and 95th percentile of
    their time (nearest rank), and the failed ones by error code."""
    times: dict[str, list[float]] = {}
    errors: dict[str, dict[str, int]] = {}
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.peer] = counts.get(o.peer, 0) + 1
        if o.seconds is not None:
            times.setdefault(o.peer, []).append(o.seconds)
        errors.setdefault(o.peer, {})
        if o.code:
            errors[o.peer][o.code] = errors[o.peer].get(o.code, 0) + 1
    stats = {}
    for peer, by_code in errors.items():
        took = sorted(times.get(peer, []))
        stats[peer] = {
            "since": since.isoformat(timespec="seconds"),
            "delegations": counts[peer],
            "median_seconds": _rank(took, 0.5), "p95_seconds": _rank(took, 0.95),
            "errors": dict(sorted(by_code.items())),
        }
    return stats


def _rank(ordered: list[float], quantile: float) -> float | None:
    if not ordered:
        return None
    return round(ordered[max(math.ceil(quantile * len(ordered)) - 1, 0)], 4)
