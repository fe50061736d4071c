"""Inbound throughput and latency, and memory: a blocking echo task, auth on, at each
connection count, against Butler's /v2/tasks and its standard A2A 1.0 SendMessage (JSON-RPC
and HTTP+JSON), and the same two bindings on the reference servers: the Python a2a-sdk
(SQLite store, durable; and its default in-memory store) and @a2a-js/sdk (its default
in-memory store)."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from harness import a2a_js, butlers, wrk
from harness.bootstrap import BENCH
from harness.procs import Cpus, Server, http_json, start
from internal.http import hash_token, new_token

JSONRPC_BODY = ('{"jsonrpc":"2.0","id":"{n}","method":"SendMessage","params":{"message":'
                '{"messageId":"{n}","role":"ROLE_USER","parts":[{"text":"hello {n}"}]}}}')
REST_BODY = '{"message":{"messageId":"{n}","role":"ROLE_USER","parts":[{"text":"hello {n}"}]}}'
A2A_HEADERS = (("A2A-Version", "1.0"),)
_DONE_MARKERS = ("TASK_STATE_COMPLETED", '"completed"')
# The standard A2A bindings measured: (card's protocolBinding, body, path after the
# interface URL, fallback path, a marker of the binding's success envelope).
BINDINGS = {
    "jsonrpc": ("JSONRPC", JSONRPC_BODY, "", "/", '"result"'),
    "rest": ("HTTP+JSON", REST_BODY, "/message:send", "/message:send", '"task"'),
}


def _probe(url: str, token: str, binding: str) -> tuple[str, str] | None:
    """(path, marker of a completed answer) when ``url`` serves a blocking SendMessage on
    ``binding``: at the URL its agent card advertises for it, else at the usual path;
    None when it does not."""
    name, body_t, suffix, fallback, envelope = BINDINGS[binding]
    paths = []
    status, raw = http_json("GET", url + "/.well-known/agent-card.json")
    if status == 200:
        try:
            card = json.loads(raw)
        except ValueError:
            card = {}
        for iface in card.get("supportedInterfaces", []) or []:
            if str(iface.get("protocolBinding", "")).upper() == name:
                iface_url = str(iface.get("url", "")).rstrip("/")
                if iface_url.startswith(url):
                    paths.append(iface_url.removeprefix(url) + suffix or "/")
    paths.append(fallback)
    for path in dict.fromkeys(paths):
        body = body_t.replace("{n}", "probe-" + new_token()[:12]).encode()
        status, raw = http_json("POST", url + path, body,
                                {"Authorization": f"Bearer {token}", **dict(A2A_HEADERS)})
        text = raw.decode(errors="replace")
        if status == 200 and envelope in text:
            for marker in _DONE_MARKERS:
                if marker in text:
                    return path, marker
    return None


def _a2a_series(server: Server, token: str, levels: list[int], seconds: float,
                warmup: float, cpus: Cpus, label: str) -> dict[str, Any]:
    """Both standard bindings of one server: levels, or "not available yet"."""
    out: dict[str, Any] = {}
    for binding in BINDINGS:
        probe = _probe(server.url, token, binding)
        if probe is None:
            out[binding] = "not available yet"
            print(f"[bench]   {label} {binding}: not available yet", file=sys.stderr)
            continue
        load = wrk.Load(path=probe[0], body=BINDINGS[binding][1], tokens=(token,),
                        headers=A2A_HEADERS, expect=probe[1])
        out[binding] = _levels(server, load, levels, seconds, warmup, cpus,
                               f"{label} {binding}")
    return out


def _levels(server: Server, load: wrk.Load, levels: list[int], seconds: float,
            warmup: float, cpus: Cpus, label: str) -> list[dict[str, Any]]:
    out = []
    for conns in levels:
        result = wrk.measure(server.url, load, connections=conns, seconds=seconds,
                             warmup=warmup, cpu=cpus.load, pids=(server.pid,))
        print(f"[bench]   {label:<22} c={conns:<3} {result.rps:8.1f} req/s  "
              f"p50 {result.p50_ms:7.2f} ms  p99 {result.p99_ms:7.2f} ms"
              + (f"  ({result.bad} bad)" if result.bad else ""), file=sys.stderr)
        if result.bad > result.requests / 100:
            print(f"[bench]   WARNING: {result.bad} of {result.requests} answers were not a "
                  "completed task; these numbers are not valid", file=sys.stderr)
        out.append(result.to_json())
    return out


def _memory(server: Server, idle_mb: float) -> dict[str, float]:
    return {"idle_rss_mb": round(idle_mb, 1), "loaded_rss_mb": round(server.rss_mb(), 1),
            "peak_rss_mb": round(server.peak_rss_mb(), 1)}


def _storage(data_dir: Path) -> dict[str, Any]:
    """Rows written by the /v2 runs (warm-ups included): tasks, and audit records per task."""
    def count(db: str, table: str) -> int:
        with sqlite3.connect(f"file:{data_dir / db}?mode=ro", uri=True) as conn:
            return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    try:
        tasks, audit = count("tasks.db", "tasks"), count("audit.db", "audit")
    except sqlite3.Error as exc:
        return {"error": str(exc)}
    return {"tasks": tasks, "audit_records": audit,
            "audit_records_per_task": round(audit / tasks, 2) if tasks else None}


def run_butler(work: Path, cpus: Cpus, levels: list[int], seconds: float,
               warmup: float) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    butler = butlers.start_single(work, cpus.server)
    try:
        time.sleep(1.0)
        idle = butler.server.rss_mb()
        auth = (butler.token,)
        v2 = wrk.Load(path="/v2/tasks", body=butlers.v2_body(), tokens=auth,
                      expect='"state":"completed"')
        results: dict[str, Any] = {
            "butler_v2": _levels(butler.server, v2, levels, seconds, warmup, cpus,
                                 "butler /v2/tasks"),
        }
        memory = _memory(butler.server, idle)
        results["butler_storage"] = _storage(work / "bench-data")
        a2a = _a2a_series(butler.server, butler.token, levels, seconds, warmup, cpus,
                          "butler")
        results["butler_jsonrpc"], results["butler_rest"] = a2a["jsonrpc"], a2a["rest"]
        memory["loaded_rss_after_a2a_mb"] = round(butler.server.rss_mb(), 1)
        results["butler_memory"] = memory
        return results
    finally:
        butler.server.stop()


def run_reference(work: Path, cpus: Cpus, levels: list[int], seconds: float,
                  warmup: float, kind: str) -> dict[str, Any] | str:
    """One reference server, both bindings: ``kind`` is "sqlite" or "memory" (the
    a2a-sdk), or "js" (@a2a-js/sdk, in memory); a string when it cannot run."""
    work.mkdir(parents=True, exist_ok=True)
    token = new_token()
    if kind == "js":
        why_not = a2a_js.ensure_installed()
        if why_not is not None:
            print(f"[bench]   @a2a-js/sdk: {why_not}", file=sys.stderr)
            return why_not
        argv = a2a_js.argv(hash_token(token))
        name, label = "reference-js", "a2a-js in-memory"
    else:
        argv = [sys.executable, str(BENCH / "harness" / "reference_server.py"),
                "--token-hash", hash_token(token)]
        if kind == "sqlite":
            argv += ["--db", str(work / "reference-tasks.db")]
        name, label = f"reference-{kind}", f"a2a-sdk {kind}"
    server = start(name, argv, work / f"{name}.log", cpus.server)
    try:
        time.sleep(1.0)
        idle = server.rss_mb()
        series = _a2a_series(server, token, levels, seconds, warmup, cpus, label)
        if not isinstance(series["jsonrpc"], list):
            raise RuntimeError(f"{name} does not answer SendMessage; see {server.log}")
        # "results" stays the JSON-RPC series, as in earlier results files.
        out = {"results": series["jsonrpc"], "rest": series["rest"],
               "memory": _memory(server, idle)}
        if kind == "js":
            out |= {"sdk": a2a_js.sdk_version(), "node": a2a_js.node_version()}
        return out
    finally:
        server.stop()


def ratios(butler: list[dict[str, Any]], reference: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Butler / reference at each connection count: throughput (higher is better for
    Butler) and latency (lower is better for Butler)."""
    out = []
    for b, r in zip(butler, reference, strict=True):
        out.append({
            "connections": b["connections"],
            "throughput_x": round(b["rps"] / r["rps"], 2) if r["rps"] else None,
            "p50_x": round(b["p50_ms"] / r["p50_ms"], 3) if r["p50_ms"] else None,
            "p99_x": round(b["p99_ms"] / r["p99_ms"], 3) if r["p99_ms"] else None,
        })
    return out


def _series(res: dict[str, Any], server: str, binding: str) -> list[dict[str, Any]] | None:
    """A measured series, or None (not run, skipped, not available)."""
    if server == "butler":
        data = res.get({"v2": "butler_v2", "jsonrpc": "butler_jsonrpc",
                        "rest": "butler_rest"}[binding])
    else:
        ref = res.get(f"reference_{server}")
        data = ref.get({"jsonrpc": "results", "rest": "rest"}[binding]) \
            if isinstance(ref, dict) else None
    return data if isinstance(data, list) else None


def all_ratios(res: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Every comparison the targets name: Butler's standard A2A bindings against the same
    binding on each reference and against Butler's own /v2/tasks; /v2/tasks against the
    a2a-sdk (JSON-RPC)."""
    pairs = {f"{b}_vs_{ref}": (("butler", b), (ref, b))
             for b in ("jsonrpc", "rest") for ref in ("js", "memory", "sqlite")}
    pairs |= {f"{b}_vs_v2": (("butler", b), ("butler", "v2")) for b in ("jsonrpc", "rest")}
    pairs |= {"vs_sqlite": (("butler", "v2"), ("sqlite", "jsonrpc")),
              "vs_memory": (("butler", "v2"), ("memory", "jsonrpc"))}
    out = {}
    for name, (mine, theirs) in pairs.items():
        a, b = _series(res, *mine), _series(res, *theirs)
        if a is not None and b is not None:
            out[name] = ratios(a, b)
    return out
