"""The issue's targets, checked against a run's results (reported, never asserted)."""

from __future__ import annotations

from typing import Any

from intent import report as intent_report

VS_JS_AT_64_X = 1.5  # Butler's SendMessage req/s / @a2a-js/sdk's, 64 connections
VS_JS_AT_1_X = 1.0
A2A_P99_AT_64_MS = 25.0
WITHIN_V2 = 0.10  # SendMessage req/s at least 90 % of /v2/tasks'
V2_P99_AT_64_MS = 20.0
PER_HOP_P50_MS = 1.5  # issue 24 item 4 (issue 8 asked 2 ms)
REGISTRY_P99_MS = 5.0
REGISTRY_AGENTS = 1_000_000
FREE_TEXT_P99_MS = 20.0
FREE_TEXT_AGENTS = 100_000
IDLE_RSS_MB = 50.0  # issue 24 item 7 (issue 8 asked 80 MB)


def _at(series: Any, conns: int) -> dict[str, Any] | None:
    if not isinstance(series, list):
        return None
    return next((r for r in series if r["connections"] == conns), None)


def _ratio_at(inbound: dict[str, Any], name: str, conns: int) -> float | None:
    point = _at(inbound.get("ratios", {}).get(name), conns)
    return None if point is None else point["throughput_x"]


def _a2a_targets(inbound: dict[str, Any]) -> list[dict[str, Any]]:
    """Item 2: Butler's standard SendMessage (blocking, durable) against @a2a-js/sdk, its
    p99 at 64 connections, and its distance from Butler's own /v2/tasks."""
    out: list[dict[str, Any]] = []
    for binding, label in (("jsonrpc", "JSON-RPC"), ("rest", "HTTP+JSON")):
        for conns, goal in ((64, VS_JS_AT_64_X), (1, VS_JS_AT_1_X)):
            x = _ratio_at(inbound, f"{binding}_vs_js", conns)
            if x is not None:
                out.append({"name": f"{label} SendMessage vs @a2a-js/sdk, {conns} conns",
                            "goal": f">= {goal:g}x", "measured": f"{x}x", "met": x >= goal})
        point = _at(inbound.get(f"butler_{binding}"), 64)
        if point is not None:
            out.append({"name": f"{label} SendMessage p99 at 64 connections, durable",
                        "goal": f"<= {A2A_P99_AT_64_MS:g} ms",
                        "measured": f"{point['p99_ms']:.1f} ms",
                        "met": point["p99_ms"] <= A2A_P99_AT_64_MS})
        for conns in (1, 64):
            x = _ratio_at(inbound, f"{binding}_vs_v2", conns)
            if x is not None:
                out.append({"name": f"{label} SendMessage req/s vs /v2/tasks, {conns} conns",
                            "goal": f">= {1 - WITHIN_V2:g}x (within {WITHIN_V2:.0%})",
                            "measured": f"{x}x", "met": x >= 1 - WITHIN_V2})
    return out


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    inbound = results.get("inbound", {})
    out += _a2a_targets(inbound)
    butler = _at(inbound.get("butler_v2"), 64)
    if butler is not None:
        out.append({"name": "/v2/tasks p99 at 64 connections, durable",
                    "goal": f"<= {V2_P99_AT_64_MS:g} ms", "measured": f"{butler['p99_ms']:.1f} ms",
                    "met": butler["p99_ms"] <= V2_P99_AT_64_MS})
    hops = results.get("hops", {})
    if "per_hop_p50_ms" in hops:
        out.append({"name": "per-hop overhead p50", "goal": f"<= {PER_HOP_P50_MS:g} ms",
                    "measured": f"{hops['per_hop_p50_ms']:.2f} ms",
                    "met": hops["per_hop_p50_ms"] <= PER_HOP_P50_MS})
    for kind in ("sqlite", "redis"):
        data = results.get("registry", {}).get(kind)
        if not isinstance(data, dict) or not data.get("scales"):
            continue
        last = data["scales"][-1]
        p99 = last["http_c1"]["p99_ms"]
        out.append({"name": f"registry capability query p99, {kind}, {last['agents']} "
                    "agents (HTTP)",
                    "goal": f"<= {REGISTRY_P99_MS:g} ms", "measured": f"{p99:.2f} ms",
                    # Below 1M agents (--quick, --scales) the target cannot be judged.
                    "met": p99 <= REGISTRY_P99_MS if last["agents"] >= REGISTRY_AGENTS
                    else None})
        at = next((s for s in data["scales"] if s["agents"] >= FREE_TEXT_AGENTS), last)
        texts = at.get("free_text_c1", {})
        if texts:
            label, worst = max(texts.items(), key=lambda kv: kv[1]["p99_ms"])
            out.append({"name": f"registry free-text query p99 (worst: {label}), {kind}, "
                        f"{at['agents']} agents (HTTP)",
                        "goal": f"<= {FREE_TEXT_P99_MS:g} ms",
                        "measured": f"{worst['p99_ms']:.2f} ms",
                        "met": worst["p99_ms"] <= FREE_TEXT_P99_MS
                        if at["agents"] >= FREE_TEXT_AGENTS else None})
    memory = inbound.get("butler_memory")
    if memory:
        out.append({"name": "idle RSS of the daemon", "goal": f"<= {IDLE_RSS_MB:g} MB",
                    "measured": f"{memory['idle_rss_mb']:.1f} MB",
                    "met": memory["idle_rss_mb"] <= IDLE_RSS_MB})
    if "intent" in results:
        out += intent_report.targets(results["intent"])
    return out
