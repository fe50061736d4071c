"""Operational sections: server limits, tasks, telemetry, logging, rate limits, metrics."""

from __future__ import annotations

from typing import Any

from butler.config import model as m
from butler.config.common import url
from butler.config.node import Node
from internal.shares import Share


def parse_limits(node: Node | None) -> m.Limits:
    d = m.Limits()
    if node is None:
        return d
    k = node.mapping(set(d.__dataclass_fields__))
    values: dict[str, Any] = {}
    for key, sub in k.items():
        if key == "refusal_hold_seconds":
            values[key] = sub.number(minimum=0)
        elif key.endswith("_seconds"):
            values[key] = sub.number(minimum=0.01)
        else:
            values[key] = sub.integer(minimum=1)
    return m.Limits(**values)


def parse_tasks(node: Node | None) -> m.TasksConfig:
    d = m.TasksConfig()
    if node is None:
        return d
    k = node.mapping(set(d.__dataclass_fields__))
    return m.TasksConfig(
        retention_hours=k["retention_hours"].number(minimum=0) if "retention_hours" in k
        else d.retention_hours,
        default_timeout_seconds=k["default_timeout_seconds"].number(minimum=0.01)
        if "default_timeout_seconds" in k else d.default_timeout_seconds,
        max_page_size=k["max_page_size"].integer(minimum=1, maximum=1000)
        if "max_page_size" in k else d.max_page_size,
    )


def parse_audit(node: Node | None) -> m.AuditConfig:
    d = m.AuditConfig()
    if node is None:
        return d
    k = node.mapping(set(d.__dataclass_fields__))
    return m.AuditConfig(
        retention_days=k["retention_days"].number(minimum=0) if "retention_days" in k
        else d.retention_days,
        segment_records=k["segment_records"].integer(minimum=1) if "segment_records" in k
        else d.segment_records,
    )


def parse_telemetry(node: Node | None) -> m.TelemetryConfig:
    d = m.TelemetryConfig()
    if node is None:
        return d
    k = node.mapping({"exporter", "service_name", "otlp_endpoint"})
    return m.TelemetryConfig(
        exporter=k["exporter"].choice(("none", "console", "otlp")) if "exporter" in k
        else d.exporter,
        service_name=k["service_name"].string() if "service_name" in k else d.service_name,
        otlp_endpoint=url(k["otlp_endpoint"]) if "otlp_endpoint" in k else d.otlp_endpoint,
    )


def parse_logging(node: Node | None) -> m.LoggingConfig:
    d = m.LoggingConfig()
    if node is None:
        return d
    k = node.mapping({"level", "format"})
    return m.LoggingConfig(
        level=k["level"].choice(("debug", "info", "warning", "error")) if "level" in k
        else d.level,
        format=_log_format(k["format"]) if "format" in k else d.format,
    )


def _log_format(node: Node) -> str:
    # "text" is the earlier name of the key=value format.
    choice = node.choice(("kv", "json", "text"))
    return "kv" if choice == "text" else choice


def parse_rate_limits(node: Node | None) -> m.RateLimitConfig:
    d = m.RateLimitConfig()
    if node is None:
        return d
    k = node.mapping(set(d.__dataclass_fields__))
    values: dict[str, Any] = {}
    for key, sub in k.items():
        if key == "max_inflight_tasks_per_caller":
            values[key] = sub.integer(minimum=0)
        else:
            values[key] = sub.number(minimum=0)
    return m.RateLimitConfig(**values)


SHARE_KEYS = {"total", "per_caller", "anonymous"}


def parse_shares(node: Node | None, limits: m.Limits, rates: m.RateLimitConfig,
                 ) -> m.SharesConfig:
    """``shares:``, a mapping of pool to ``{total, per_caller, anonymous}``. The totals of
    the in-flight and stream pools are ``server.max_inflight`` and ``server.max_streams``
    (and a caller's streams ``server.max_streams_per_caller``); a caller's running tasks
    are ``rate_limits.max_inflight_tasks_per_caller`` (0: no share below the total)."""
    d = m.SharesConfig()
    tasks = rates.max_inflight_tasks_per_caller
    base = {
        "inflight": Share(limits.max_inflight),
        "streams": Share(limits.max_streams, limits.max_streams_per_caller),
        "running_tasks": Share(d.running_tasks.total, tasks or d.running_tasks.total),
        "mcp_sessions": d.mcp_sessions,
        "push_configs": d.push_configs,
        "memory_entries": d.memory_entries,
    }
    if node is None:
        return m.SharesConfig(**base)
    pools = node.mapping(set(base))
    for name, sub in pools.items():
        k = sub.mapping(SHARE_KEYS)
        if "total" in k and name in ("inflight", "streams"):
            k["total"].fail(f"is server.max_{name} (set it there)")
        share = base[name]
        total = k["total"].integer(minimum=1) if "total" in k else share.total
        per_caller = k["per_caller"].integer(minimum=1, maximum=total) \
            if "per_caller" in k else share.per_caller
        anonymous = k["anonymous"].integer(minimum=1, maximum=total) \
            if "anonymous" in k else share.anonymous
        base[name] = Share(total, min(per_caller, total), anonymous)
    return m.SharesConfig(**base)


def parse_metrics(node: Node | None) -> m.MetricsConfig:
    d = m.MetricsConfig()
    if node is None:
        return d
    k = node.mapping({"enabled", "listen"})
    listen = k["listen"].string(allow_empty=True) if "listen" in k else d.listen
    if listen:
        host, _, port = listen.rpartition(":")
        if host.strip("[]") not in ("127.0.0.1", "::1", "localhost") or not port.isdigit() \
                or not 0 <= int(port) <= 65535:
            k["listen"].fail("expected a loopback host:port such as 127.0.0.1:9464 "
                             "(the separate metrics port is unauthenticated)")
    return m.MetricsConfig(
        enabled=k["enabled"].boolean() if "enabled" in k else d.enabled,
        listen=listen,
    )
