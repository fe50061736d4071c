"""Scenario 2 (inbound throughput and latency) and 5 (memory): a blocking echo task, auth
on, durable storage, at each connection count, against Butler's /v2/tasks, Butler's A2A
1.0 JSON-RPC SendMessage (when it answers) and the a2a-sdk reference server."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from harness import butlers, wrk
from harness.bootstrap import BENCH
from harness.procs import Cpus, Server, http_json, start
from internal.http import hash_token, new_token

JSONRPC_BODY = ('{"jsonrpc":"2.0","id":"{n}","method":"SendMessage","params":{"message":'
                '{"messageId":"{n}","role":"ROLE_USER","parts":[{"text":"hello {n}"}]}}}')
JSONRPC_HEADERS = (("A2A-Version", "1.0"),)
_DONE_MARKERS = ("TASK_STATE_COMPLETED", '"completed"')


def _probe_jsonrpc(url: str, token: str) -> tuple[str, str] | None:
    """(path, marker of a completed answer) when ``url`` serves JSON-RPC SendMessage: at
    the JSON-RPC URL its agent card advertises, else at ``/``; None when it does not."""
    paths = []
    status, raw = http_json("GET", url + "/.well-known/agent-card.json")
    if status == 200:
        try:
            card = json.loads(raw)
        except ValueError:
            card = {}
        for iface in card.get("supportedInterfaces", []) or []:
            if str(iface.get("protocolBinding", "")).upper() == "JSONRPC":
                iface_url = str(iface.get("url", ""))
                if iface_url.startswith(url):
                    paths.append(iface_url.removeprefix(url) or "/")
    paths.append("/")
    for path in dict.fromkeys(paths):
        body = JSONRPC_BODY.replace("{n}", "probe-" + new_token()[:12]).encode()
        status, raw = http_json("POST", url + path, body,
                                {"Authorization": f"Bearer {token}", **dict(JSONRPC_HEADERS)})
        text = raw.decode(errors="replace")
        if status == 200 and '"jsonrpc"' in text and '"result"' in text:
            for marker in _DONE_MARKERS:
                if marker in text:
                    return path, marker
    return None


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
        probe = _probe_jsonrpc(butler.url, butler.token)
        if probe is None:
            results["butler_jsonrpc"] = "not available yet"
            print("[bench]   butler JSON-RPC SendMessage: not available yet", file=sys.stderr)
        else:
            path, marker = probe
            rpc = wrk.Load(path=path, body=JSONRPC_BODY, tokens=auth, headers=JSONRPC_HEADERS,
                           expect=marker)
            results["butler_jsonrpc"] = _levels(butler.server, rpc, levels, seconds, warmup,
                                                cpus, "butler JSON-RPC")
            memory["loaded_rss_after_jsonrpc_mb"] = round(butler.server.rss_mb(), 1)
        results["butler_memory"] = memory
        return results
    finally:
        butler.server.stop()


def run_reference(work: Path, cpus: Cpus, levels: list[int], seconds: float,
                  warmup: float, durable: bool) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    token = new_token()
    argv = [sys.executable, str(BENCH / "harness" / "reference_server.py"),
            "--token-hash", hash_token(token)]
    if durable:
        argv += ["--db", str(work / "reference-tasks.db")]
    name = "reference-sqlite" if durable else "reference-memory"
    server = start(name, argv, work / f"{name}.log", cpus.server)
    try:
        time.sleep(1.0)
        idle = server.rss_mb()
        probe = _probe_jsonrpc(server.url, token)
        if probe is None:
            raise RuntimeError(f"{name} does not answer SendMessage; see {server.log}")
        rpc = wrk.Load(path=probe[0], body=JSONRPC_BODY, tokens=(token,),
                       headers=JSONRPC_HEADERS, expect=probe[1])
        label = "a2a-sdk " + ("sqlite" if durable else "in-memory")
        return {"results": _levels(server, rpc, levels, seconds, warmup, cpus, label),
                "memory": _memory(server, idle)}
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
