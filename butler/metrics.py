"""A small Prometheus registry: labelled counters and gauges, text exposition 0.0.4."""

from __future__ import annotations

import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from aiohttp import web

from internal.http import Handler

LabelValues = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


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
                pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in zip(self.labels, values,
                                                                       strict=True))
                lines.append(f"{self.name}{{{pairs}}} {number}")
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


class Registry:
    def __init__(self) -> None:
        self._metrics: list[_Metric] = []

    def counter(self, name: str, help_text: str, labels: tuple[str, ...] = ()) -> Counter:
        metric = Counter(name, help_text, labels)
        self._metrics.append(metric)
        return metric

    def gauge(self, name: str, help_text: str, labels: tuple[str, ...] = (),
              collect: Callable[[], dict[LabelValues, float]] | None = None) -> Gauge:
        metric = Gauge(name, help_text, labels, collect)
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
        self.rate_limited = r.counter("butler_rate_limited_total",
                                      "Requests answered 429, by limit", ("limit",))

    def render(self) -> str:
        return self.registry.render()


def observe_audit(metrics: ButlerMetrics, kind: str, fields: dict[str, Any]) -> None:
    """Metrics follow the audit trail: every decision worth counting is recorded there."""
    code = fields.get("code")
    if kind == "refusal":
        metrics.refusals.inc(str(code or "refused"))
    elif kind == "task_finished":
        metrics.tasks.inc(str(fields.get("decision", "")))
        before, after = fields.get("budget_before"), fields.get("budget_after")
        if isinstance(before, Decimal) and isinstance(after, Decimal) and before > after:
            metrics.spent.inc(amount=before - after)
    elif kind == "delegation_result":
        peer = str((fields.get("detail") or {}).get("peer", "?"))
        metrics.delegations.inc(peer, str(code or fields.get("decision", "")))


def metrics_middleware(metrics: ButlerMetrics) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            resource = request.match_info.route.resource
            route = resource.canonical if resource is not None else "unmatched"
            metrics.requests.inc(f"{request.method} {route}", str(status))

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
