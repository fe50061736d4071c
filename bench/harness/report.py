"""Results as tables: printed as text, or as Markdown for docs/performance.md."""

from __future__ import annotations

from typing import Any

from intent import report as intent_report

Table = tuple[str, list[str], list[list[str]]]  # title, header, rows


def _f(value: Any, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else str(value)


_SERVERS = (("Butler /v2/tasks", "butler", "v2"),
            ("Butler JSON-RPC SendMessage", "butler", "jsonrpc"),
            ("Butler HTTP+JSON SendMessage", "butler", "rest"),
            ("@a2a-js/sdk JSON-RPC, in-memory", "js", "jsonrpc"),
            ("@a2a-js/sdk HTTP+JSON, in-memory", "js", "rest"),
            ("a2a-sdk JSON-RPC, in-memory", "memory", "jsonrpc"),
            ("a2a-sdk HTTP+JSON, in-memory", "memory", "rest"),
            ("a2a-sdk JSON-RPC, SQLite (durable)", "sqlite", "jsonrpc"),
            ("a2a-sdk HTTP+JSON, SQLite (durable)", "sqlite", "rest"))


def _raw(res: dict[str, Any], server: str, binding: str) -> Any:
    """A series as stored: a list of load points, a reason string, or None."""
    if server == "butler":
        return res.get(f"butler_{binding}")
    ref = res.get(f"reference_{server}")
    if not isinstance(ref, dict):
        return ref
    return ref.get("results" if binding == "jsonrpc" else binding)


def _headline(res: dict[str, Any]) -> Table:
    """The standard A2A path first: Butler's SendMessage (blocking; durable) against both
    SDKs' default in-memory stores, and against Butler's own /v2/tasks."""
    rows = []
    ratios = res.get("ratios", {})
    js = res.get("reference_js")
    for binding, label in (("jsonrpc", "JSON-RPC"), ("rest", "HTTP+JSON")):
        mine = _raw(res, "butler", binding)
        if not isinstance(mine, list):
            continue
        theirs = {ref: _raw(res, ref, binding) for ref in ("js", "memory")}
        for i, r in enumerate(mine):
            row = [label, str(r["connections"]), _f(r["rps"], 0), _f(r["p99_ms"])]
            for ref in ("js", "memory"):
                other = theirs[ref]
                if isinstance(other, list):
                    o = other[i]
                    ratio = ratios.get(f"{binding}_vs_{ref}", [{}] * len(mine))[i]
                    x = ratio.get("throughput_x")
                    row += [_f(o["rps"], 0), _f(o["p99_ms"]), "" if x is None else f"{_f(x)}x"]
                else:  # a reason, given once in the title
                    row += ["skipped" if isinstance(other, str) else "not run", "", ""]
            own = ratios.get(f"{binding}_vs_v2")
            row.append(f"{_f(own[i]['throughput_x'])}x" if own else "")
            rows.append(row)
    js_name = (f"@a2a-js/sdk {js['sdk']}" if isinstance(js, dict) and "sdk" in js
               else f"@a2a-js/sdk ({js})" if isinstance(js, str) else "@a2a-js/sdk")
    return (f"Standard A2A 1.0 SendMessage, blocking: Butler (durable, auth on) against "
            f"{js_name} and a2a-sdk with their default in-memory stores (same load; "
            "x = Butler req/s / theirs)",
            ["binding", "conns", "Butler req/s", "Butler p99 ms", "a2a-js req/s",
             "a2a-js p99 ms", "x a2a-js", "a2a-sdk req/s", "a2a-sdk p99 ms", "x a2a-sdk",
             "x own /v2/tasks"], rows)


def _inbound(res: dict[str, Any]) -> Table:
    rows = []
    for label, server, binding in _SERVERS:
        data = _raw(res, server, binding)
        if isinstance(data, list):
            rows += [[label, str(r["connections"]), _f(r["rps"], 0), _f(r["p50_ms"]),
                      _f(r["p99_ms"]), str(r["bad"]), _f(r.get("noise_cpu_pct", 0), 0)]
                     for r in data]
        elif data is not None:
            rows.append([label, "-", str(data), "", "", "", ""])
    return ("Every series (blocking echo task, auth on; noise = CPU % other processes took)",
            ["server", "conns", "req/s", "p50 ms", "p99 ms", "bad", "noise %"], rows)


_RATIOS = (("jsonrpc_vs_js", "JSON-RPC vs @a2a-js/sdk (in-memory)"),
           ("rest_vs_js", "HTTP+JSON vs @a2a-js/sdk (in-memory)"),
           ("jsonrpc_vs_memory", "JSON-RPC vs a2a-sdk (in-memory)"),
           ("rest_vs_memory", "HTTP+JSON vs a2a-sdk (in-memory)"),
           ("jsonrpc_vs_sqlite", "JSON-RPC vs a2a-sdk SQLite (same workload)"),
           ("rest_vs_sqlite", "HTTP+JSON vs a2a-sdk SQLite (same workload)"),
           ("jsonrpc_vs_v2", "JSON-RPC vs Butler /v2/tasks"),
           ("rest_vs_v2", "HTTP+JSON vs Butler /v2/tasks"),
           ("vs_sqlite", "/v2 vs a2a-sdk SQLite JSON-RPC (same workload)"),
           ("vs_memory", "/v2 vs a2a-sdk in-memory JSON-RPC (not durable)"))


def _ratios(res: dict[str, Any]) -> Table:
    """One row per comparison, the connection counts side by side."""
    found = [(label, res.get("ratios", {}).get(ref, [])) for ref, label in _RATIOS]
    found = [(label, points) for label, points in found if points]
    conns = [str(r["connections"]) for r in found[0][1]] if found else []
    rows = [[label]
            + [f"{_f(r['throughput_x'])}x" for r in points]
            + [f"{_f(r['p50_x'], 2)} / {_f(r['p99_x'], 2)}" for r in points]
            for label, points in found]
    return ("Butler / other, by connections (throughput: higher is better; p50 / p99 "
            "latency ratios: lower is better)",
            ["comparison"] + [f"req/s x, {c} conns" for c in conns]
            + [f"p50 / p99 x, {c} conns" for c in conns], rows)


def _hops(res: dict[str, Any]) -> Table:
    rows = [[str(c["instances"]), _f(c["p50_ms"]), _f(c["p99_ms"]),
             _f(c.get("added_p50_ms", "-")), _f(c.get("added_p99_ms", "-")),
             _f(c.get("noise_cpu_pct", 0), 0)]
            for c in res.get("chains", [])]
    if "per_hop_p50_ms" in res:
        rows.append(["per hop (avg)", "", "", _f(res["per_hop_p50_ms"]),
                     _f(res["per_hop_p99_ms"]), ""])
    return ("Delegation chains, 1 connection (added = this chain minus the one before)",
            ["instances", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "noise %"],
            rows)


def _registry(res: dict[str, Any]) -> Table:
    rows = []
    for kind in ("sqlite", "redis"):
        data = res.get(kind)
        if data is None:
            continue
        if not isinstance(data, dict):
            rows.append([kind, "-", str(data), "", "", "", "", "", ""])
            continue
        for s in data["scales"]:
            noise = max(s["http_c1"].get("noise_cpu_pct", 0), s["http_c16"].get("noise_cpu_pct", 0))
            rows.append([kind, str(s["agents"]), _f(s["http_c1"]["p50_ms"]),
                         _f(s["http_c1"]["p99_ms"]), _f(s["http_c16"]["rps"], 0),
                         _f(s["store_query"]["p50_ms"]), _f(s["store_query"]["p99_ms"]),
                         _f(s["store_upserts_per_s"], 0), _f(noise, 0)])
    return ("Registry capability query (limit 20; HTTP at 1 connection, and at 16)",
            ["store", "agents", "HTTP p50 ms", "HTTP p99 ms", "16 conns req/s",
             "store p50 ms", "store p99 ms", "store upserts/s", "noise %"], rows)


def _free_text(res: dict[str, Any]) -> Table:
    """One row per store and size, the four queries side by side."""
    rows, queries = [], []
    for kind in ("sqlite", "redis"):
        data = res.get(kind)
        for s in data["scales"] if isinstance(data, dict) else []:
            points = s.get("free_text_c1", {})
            queries = queries or list(points)
            rows.append([kind, str(s["agents"])]
                        + [f"{_f(r['p50_ms'])} / {_f(r['p99_ms'])}" for r in points.values()]
                        + [str(sum(r["bad"] for r in points.values())),
                           _f(max((r.get("noise_cpu_pct", 0) for r in points.values()),
                                  default=0), 0)])
    return ("Registry free-text query, HTTP p50 / p99 ms (limit 20; 1 connection; rare = "
            "0.1 % of the agents have the word, common = all of them)",
            ["store", "agents", *queries, "bad", "noise %"], rows)


def _registry_writes(res: dict[str, Any]) -> Table:
    rows = []
    for kind in ("sqlite", "redis"):
        data = res.get(kind)
        if isinstance(data, dict):
            reg = data["http_registrations"]
            rows.append([kind, str(reg["agents_before"]), _f(reg["rps"], 0),
                         _f(reg["p99_ms"]), _f(data["registry_rss_mb"], 1)])
    return ("Registry writes (HTTP PUT, 16 connections)",
            ["store", "agents before", "registrations/s", "PUT p99 ms", "registry RSS MB"],
            rows)


def _memory(res: dict[str, Any]) -> Table:
    rows = []
    for label, mem in (("Butler", res.get("butler_memory")),
                       ("@a2a-js/sdk in-memory", _ref(res, "js").get("memory")),
                       ("a2a-sdk SQLite", _ref(res, "sqlite").get("memory")),
                       ("a2a-sdk in-memory", _ref(res, "memory").get("memory"))):
        if mem:
            rows.append([label, _f(mem["idle_rss_mb"], 1), _f(mem["loaded_rss_mb"], 1),
                         _f(mem["peak_rss_mb"], 1)])
    return ("Memory (VmRSS; loaded = right after the last 64-connection run)",
            ["process", "idle MB", "after load MB", "peak MB"], rows)


def _ref(res: dict[str, Any], kind: str) -> dict[str, Any]:
    ref = res.get(f"reference_{kind}")
    return ref if isinstance(ref, dict) else {}


def _storage(res: dict[str, Any]) -> Table:
    st = res.get("butler_storage") or {}
    rows = [[str(st["tasks"]), str(st["audit_records"]), _f(st["audit_records_per_task"])]
            ] if "tasks" in st else []
    return ("Butler's writes for the /v2 runs (warm-ups included)",
            ["tasks stored", "audit records", "audit records per task"], rows)


def _targets(res: dict[str, Any]) -> Table:
    return ("Targets (measured, never asserted in tests)",
            ["target", "goal", "measured", "met"],
            [[t["name"], t["goal"], t["measured"],
              "n/a" if t["met"] is None else "yes" if t["met"] else "no"]
             for t in res.get("targets", [])])


def _speed(results: dict[str, Any]) -> Table:
    rows = [[when, _f(p["chunk_median_ms"]), _f(p["chunk_p10_ms"]), _f(p["chunk_p90_ms"])]
            for when, p in results.get("cpu_speed", {}).items()]
    return ("Server CPU speed: a fixed chunk of Python timed on the servers' CPU "
            "(lower is faster; see bench/harness/speed.py)",
            ["when", "median ms", "p10 ms", "p90 ms"], rows)


def tables(results: dict[str, Any]) -> list[Table]:
    out = [_headline(results.get("inbound", {})), _speed(results),
           _inbound(results.get("inbound", {})),
           _ratios(results.get("inbound", {})),
           _hops(results.get("hops", {})), _registry(results.get("registry", {})),
           _free_text(results.get("registry", {})),
           _registry_writes(results.get("registry", {})), _memory(results.get("inbound", {})),
           _storage(results.get("inbound", {})),
           *(intent_report.tables(results["intent"]) if "intent" in results else ()),
           _targets(results)]
    return [t for t in out if t[2]]


def text(results: dict[str, Any]) -> str:
    return _text(tables(results))


def _text(tabs: list[Table]) -> str:
    lines = []
    for title, header, rows in tabs:
        widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=True)]
        lines += ["", title,
                  "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
                  "  ".join("-" * w for w in widths)]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
                  for row in rows]
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    return _markdown(tables(results))


def _markdown(tabs: list[Table]) -> str:
    out = []
    for title, header, rows in tabs:
        out += [f"**{title}**", "", "| " + " | ".join(header) + " |",
                "|" + "|".join("---" for _ in header) + "|"]
        out += ["| " + " | ".join(row) + " |" for row in rows]
        out.append("")
    return "\n".join(out)


def hotspots(profile: dict[str, Any]) -> list[Table]:
    if "self" not in profile:
        return []
    threads = [t["thread"] for t in profile["threads"]]
    kinds = [[k["kind"], _f(k["percent"], 1)]
             + [_f(k["by_thread"].get(t, 0.0), 1) for t in threads] for k in profile["kinds"]]
    kinds.append(["all", "100.0"] + [_f(t["percent"], 1) for t in profile["threads"]])
    return [
        (f"Where the CPU goes (py-spy, {profile['active_samples']} busy samples; % of busy)",
         ["kind of work (by the frame on top)", "%"] + [f"% {t}" for t in threads], kinds),
        ("Top functions by self time", ["[thread] function", "%"],
         [[f"`{f['function']}`", _f(f["percent"], 1)] for f in profile["self"]]),
        ("Butler's functions by inclusive time", ["function", "%"],
         [[f"`{f['function']}`", _f(f["percent"], 1)] for f in profile["inclusive"]]),
    ]


def hotspots_text(profile: dict[str, Any]) -> str:
    if "self" not in profile:
        return f"Profile: {profile.get('skipped', 'not run')}"
    return _text([(t, h, [[c.strip("`") for c in r] for r in rows])
                  for t, h, rows in hotspots(profile)[:2]])
