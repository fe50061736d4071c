"""What an operator sees of the daemon's work: ``/metrics`` and the operator's log lines.

Both are read off the audit records the daemon writes anyway (``Daemon._record`` calls
``observe_audit`` and ``log_audit``), so they agree with the audit trail and a task is
counted and logged exactly when it is audited: once. Each request is counted, and at
debug logged, by ``metrics_middleware``.

The metrics are a small Prometheus registry: labelled counters, gauges and histograms,
text exposition 0.0.4. Ours rather than ``prometheus_client``: four short classes, Decimal
sums kept exact, and nothing global (each daemon has its own registry, so tests need no
reset).

The log lines: at info, one per finished task and one per refusal; at debug, one access
line per request. Lines name callers by identity; the token never reaches this module.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

from aiohttp import web

from butler.audit.log import DelegationOutcome
from butler.runtime.clock import now_iso
from butler.swarm.spend import CallerUsage
from butler.telemetry import process
from internal.http import IDENTITY, Handler

LabelValues = tuple[str, ...]
access_log = logging.getLogger("butler.access")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


# Seconds, from a fast local skill to a long delegation; the task timeout caps the top.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0, 300.0)


def _label_text(names: tuple[str, ...], values: LabelValues) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in zip(names, values, strict=True))


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...] = ()) -> None:
        self.name = name
        self.help = help_text
        self.labels = labels
        self._values: dict[LabelValues, float | Decimal] = {}
        self._lock = threading.Lock()

    def _key(self, values: tuple[str, ...]) -> LabelValues:
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name} takes labels {self.labels}")
        return values

    def samples(self) -> list[tuple[LabelValues, float | Decimal]]:
        with self._lock:
            return sorted(self._values.items())

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for values, number in self.samples():
            if values:
                lines.append(f"{self.name}{{{_label_text(self.labels, values)}}} {number}")
            else:
                lines.append(f"{self.name} {number}")
        return lines


class Counter(_Metric):
    kind = "counter"

    def inc(self, *labels: str, amount: int | Decimal = 1) -> None:
        key = self._key(labels)
        with self._lock:
            current = self._values.get(key, 0)
            # Counting stays in ints (cheap); an amount in USD turns the sample Decimal.
            if isinstance(amount, int) and not isinstance(current, Decimal):
                self._values[key] = current + amount
            else:
                self._values[key] = Decimal(current) + amount

    def value(self, *labels: str) -> float | Decimal:
        return self._values.get(self._key(labels), 0)


class Gauge(_Metric):
    kind = "gauge"

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...] = (),
                 collect: Callable[[], dict[LabelValues, float]] | None = None) -> None:
        super().__init__(name, help_text, labels)
        self._collect = collect

    def set(self, *labels: str, value: float) -> None:
        with self._lock:
            self._values[self._key(labels)] = value

    def samples(self) -> list[tuple[LabelValues, float | Decimal]]:
        if self._collect is not None:
            fresh = self._collect()
            with self._lock:
                self._values = dict(fresh)
        return super().samples()


class Histogram(_Metric):
    """Cumulative buckets, ``_sum`` and ``_count`` per label set, as Prometheus expects."""

    kind = "histogram"

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...] = (),
                 buckets: tuple[float, ...] = DURATION_BUCKETS) -> None:
        super().__init__(name, help_text, labels)
        self.buckets = tuple(sorted(buckets))
        # Per label set: the count in each bucket (not cumulative; +Inf last), then the sum.
        self._observed: dict[LabelValues, tuple[list[int], list[float]]] = {}

    def observe(self, *labels: str, value: float) -> None:
        key = self._key(labels)
        with self._lock:
            observed = self._observed.get(key)
            if observed is None:  # not built on every call: observed per request and task
                observed = self._observed[key] = ([0] * (len(self.buckets) + 1), [0.0])
            counts, total = observed
            counts[bisect.bisect_left(self.buckets, value)] += 1
            total[0] += value

    def snapshot(self, *labels: str) -> tuple[list[int], float]:
        """The cumulative bucket counts (+Inf last) and the sum, for tests and ``render``."""
        with self._lock:
            counts, total = self._observed.get(self._key(labels),
                                               ([0] * (len(self.buckets) + 1), [0.0]))
            running, cumulative = 0, []
            for count in counts:
                running += count
                cumulative.append(running)
            return cumulative, total[0]

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        with self._lock:
            keys = sorted(self._observed)
        bounds = [repr(b) for b in self.buckets] + ["+Inf"]
        for values in keys:
            cumulative, total = self.snapshot(*values)
            prefix = _label_text(self.labels, values)
            sep = "," if prefix else ""
            for bound, count in zip(bounds, cumulative, strict=True):
                lines.append(f'{self.name}_bucket{{{prefix}{sep}le="{bound}"}} {count}')
            suffix = f"{{{prefix}}}" if prefix else ""
            lines.append(f"{self.name}_sum{suffix} {total!r}")
            lines.append(f"{self.name}_count{suffix} {cumulative[-1]}")
        return lines


class Registry:
    def __init__(self) -> None:
        self._metrics: list[_Metric] = []

    def histogram(self, name: str, help_text: str, labels: tuple[str, ...] = ()) -> Histogram:
        metric = Histogram(name, help_text, labels)
        self._metrics.append(metric)
        return metric

    def counter(self, name: str, help_text: str, labels: tuple[str, ...] = ()) -> Counter:
        metric = Counter(name, help_text, labels)
        self._metrics.append(metric)
        return metric

    def gauge(self, name: str, help_text: str, labels: tuple[str, ...] = (),
              collect: Callable[[], dict[LabelValues, float]] | None = None, *,
              kind: str = "gauge") -> Gauge:
        """``kind``: "counter" for a total read when scraped (the process's CPU time)."""
        metric = Gauge(name, help_text, labels, collect)
        metric.kind = kind
        self._metrics.append(metric)
        return metric

    def render(self) -> str:
        lines: list[str] = []
        for metric in self._metrics:
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"


class ButlerMetrics:
    """Everything the daemon exports, in one place."""

    def __init__(self) -> None:
        self.registry = Registry()
        r = self.registry
        self.requests = r.counter("butler_http_requests_total", "HTTP requests by route and status",
                                  ("route", "status"))
        self.tasks = r.counter("butler_tasks_finished_total", "Tasks by final state", ("state",))
        self.refusals = r.counter("butler_refusals_total", "Swarm refusals by code", ("code",))
        self.delegations = r.counter("butler_delegations_total",
                                     "Delegations by peer and outcome", ("peer", "outcome"))
        self.spent = r.counter("butler_budget_spent_usd_total",
                               "USD spent by finished tasks (local skills and delegations)")
        # Routes are the app's templates (``GET /v2/tasks/{id}``), skills and peers come from
        # the config or the registry: the label sets stay bounded.
        self.request_seconds = r.histogram("butler_http_request_duration_seconds",
                                           "Time to answer a request, by route", ("route",))
        self.task_seconds = r.histogram("butler_task_duration_seconds",
                                        "Time from a task's creation to its final state, "
                                        "by skill", ("skill",))
        self.delegation_seconds = r.histogram("butler_delegation_duration_seconds",
                                              "Time for a delegation's answer, by peer",
                                              ("peer",))
        # One model per config: the labels stay bounded.
        self.planner_calls = r.counter("butler_planner_calls_total",
                                       "The LLM planner's model calls, by outcome", ("outcome",))
        self.planner_tokens = r.counter("butler_planner_tokens_total",
                                        "Tokens the planner's endpoint reported, by direction",
                                        ("direction",))
        # Per caller identity: bounded, as identities are the configured tokens.
        self.caller_spent = r.counter("butler_caller_spent_usd_total",
                                      "USD spent by finished tasks, by caller", ("caller",))
        self.spend_usage: Callable[[], list[CallerUsage]] = list
        r.gauge("butler_caller_window_usd",
                "USD spent or reserved by a capped caller in the rolling window",
                ("caller", "window"), collect=lambda: self._windows("usd"))
        r.gauge("butler_caller_window_tasks", "Tasks a capped caller started in the rolling window",
                ("caller", "window"), collect=lambda: self._windows("tasks"))
        r.gauge("butler_caller_limit_usd", "A capped caller's USD cap per window",
                ("caller", "window"), collect=self._limits)
        # The delegations under way, by the task they work for (the dashboard's "waiting
        # on"): from the audit records, as everything here.
        self.waiting: dict[str, list[dict[str, Any]]] = {}
        # Set by the daemon once its audit log is open: the delegations answered since a
        # time (newest first, at most so many records read), for the peers' statistics.
        self.delegation_history: Callable[[datetime, int], Awaitable[
            list[DelegationOutcome]]] = _no_history
        # Set by the daemon once its engine exists: state -> how many tasks are in it now.
        self.running_tasks: Callable[[], dict[str, int]] = dict
        r.gauge("butler_tasks_running", "Tasks not yet final, by state", ("state",),
                collect=lambda: {(state,): float(n) for state, n in self.running_tasks().items()})
        r.gauge("butler_build_info", "Butler's version and Python's; always 1",
                ("version", "python"), collect=lambda: {process.build_labels(): 1.0})
        started = process.start_time()
        r.gauge("process_cpu_seconds_total", "User and system CPU time spent, in seconds",
                collect=lambda: {(): process.cpu_seconds()}, kind="counter")
        r.gauge("process_resident_memory_bytes", "Resident memory size, in bytes",
                collect=lambda: _known(process.resident_bytes()))
        r.gauge("process_open_fds", "Open file descriptors",
                collect=lambda: _known(process.open_fds()))
        r.gauge("process_max_fds", "The most file descriptors it may open (RLIMIT_NOFILE)",
                collect=lambda: {(): process.max_fds()})
        r.gauge("process_start_time_seconds", "When the process started, in seconds since "
                "the epoch", collect=lambda: {(): started})

    def render(self) -> str:
        return self.registry.render()

    def _windows(self, what: str) -> dict[LabelValues, float]:
        samples: dict[LabelValues, float] = {}
        for use in self.spend_usage():
            for window, usage in (("hour", use.hour), ("day", use.day)):
                samples[(use.caller, window)] = float(usage.usd if what == "usd" else usage.tasks)
        return samples

    def _limits(self) -> dict[LabelValues, float]:
        samples: dict[LabelValues, float] = {}
        for use in self.spend_usage():
            lim = use.limits
            for window, cap in (("task", lim.max_usd_per_task), ("hour", lim.max_usd_per_hour),
                                ("day", lim.max_usd_per_day)):
                if cap is not None:
                    samples[(use.caller, window)] = float(cap)
        return samples


async def _no_history(since: datetime, most: int) -> list[DelegationOutcome]:
    return []


def _known(value: float | None) -> dict[LabelValues, float]:
    return {} if value is None else {(): value}


def observe_audit(metrics: ButlerMetrics, kind: str, fields: dict[str, Any]) -> None:
    """Metrics follow the audit trail: every decision worth counting is recorded there,
    every task's end exactly once."""
    code = fields.get("code")
    detail = fields.get("detail") or {}
    if kind == "refusal":
        metrics.refusals.inc(str(code or "refused"))
    elif kind == "task_finished":
        metrics.waiting.pop(str(fields.get("task_id")), None)
        metrics.tasks.inc(str(fields.get("decision", "")))
        if "seconds" in detail:
            metrics.task_seconds.observe(detail.get("skill") or "none",
                                         value=float(detail["seconds"]))
        before, after = fields.get("budget_before"), fields.get("budget_after")
        if isinstance(before, Decimal) and isinstance(after, Decimal) and before > after:
            metrics.spent.inc(amount=before - after)
            metrics.caller_spent.inc(str(fields.get("caller", "")), amount=before - after)
    elif kind == "delegation_sent":
        chain = list(fields.get("chain") or ())
        peer = str(detail.get("peer", "?"))
        metrics.waiting.setdefault(str(fields.get("task_id")), []).append({
            "peer": peer, "hop": len(chain), "path": [*chain, peer], "since": now_iso()})
    elif kind == "delegation_result":
        peer = str(detail.get("peer", "?"))
        waiting = metrics.waiting.get(str(fields.get("task_id")), [])
        for i, entry in enumerate(waiting):
            if entry["peer"] == peer:
                del waiting[i]
                break
        if not waiting:
            metrics.waiting.pop(str(fields.get("task_id")), None)
        metrics.delegations.inc(peer, str(code or fields.get("decision", "")))
        if "seconds" in detail:
            metrics.delegation_seconds.observe(peer, value=float(detail["seconds"]))
    elif kind == "planner_call":
        metrics.planner_calls.inc(str(code or "ok"))
        for direction in ("input", "output"):
            if f"{direction}_tokens" in detail:
                metrics.planner_tokens.inc(direction, amount=detail[f"{direction}_tokens"])


def log_request(method: str, path: str, status: int, seconds: float, caller: str) -> None:
    """``path`` without its query; ``caller`` the identity's name ("" before auth)."""
    if access_log.isEnabledFor(logging.DEBUG):
        access_log.debug("request", extra={"kv": {
            "method": method, "path": path, "status": status,
            "duration_ms": round(seconds * 1000, 1), "caller": caller or "-"}})


def metrics_middleware(metrics: ButlerMetrics) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        status = 500
        started = time.monotonic()
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            resource = request.match_info.route.resource
            # Unmatched: one label, whatever the method (any token is a method to aiohttp,
            # and a label per made-up method would grow without bound).
            route = f"{request.method} {resource.canonical}" if resource is not None \
                else "unmatched"
            seconds = time.monotonic() - started
            metrics.requests.inc(route, str(status))
            metrics.request_seconds.observe(route, value=seconds)
            identity = request.get(IDENTITY)
            log_request(request.method, request.path, status, seconds,
                        identity.name if identity is not None else "")

    return middleware


def metrics_route(metrics: ButlerMetrics) -> web.RouteDef:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=metrics.render(), content_type="text/plain",
                            headers={"X-Content-Type-Options": "nosniff"}, charset="utf-8")

    return web.get("/metrics", handler)


async def serve_metrics(metrics: ButlerMetrics, listen: str) -> web.AppRunner:
    """The unauthenticated metrics port: loopback only (checked when the config loads)."""
    host, _, port = listen.rpartition(":")
    app = web.Application()
    app.add_routes([metrics_route(metrics)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host.strip("[]"), int(port)).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
