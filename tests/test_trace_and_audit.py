"""One trace across hops; the audit trail records every decision and detects edits."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import aiohttp
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from internal.protocol.a2a.model import TaskRequest, TaskState
from tests.delegation_support import Mesh, skill

ROOT = Path(__file__).resolve().parent.parent


async def test_one_trace_id_across_three_hops(mesh: Mesh, http: aiohttp.ClientSession) -> None:
    exporters = {name: InMemorySpanExporter() for name in ("a", "b", "c")}
    for name in ("a", "b"):
        mesh.agent(name, skills=[], daemon_kwargs={"span_exporter": exporters[name]})
    mesh.agent("c", skills=[skill("x.work", "0.05")],
               daemon_kwargs={"span_exporter": exporters["c"]})
    mesh.link("a", "b", ["x.work"])
    mesh.link("b", "c", ["x.work"])
    agents = await mesh.start()

    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    async with http.post(
        f"{agents['a'].url}/v2/tasks", json={"task": "t", "capabilities_needed": ["x.work"]},
        headers={**agents["a"].headers(),
                 "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
    ) as resp:
        body = await resp.json()
        assert resp.headers["X-Swarm-Trace-ID"] == trace_id
    assert body["state"] == "completed"
    assert body["swarm"]["trace_id"] == trace_id
    # cost tree: a -> b -> c, the price of c's skill rolled up to the top
    assert body["cost"]["total_usd"] == "0.05"
    assert body["cost"]["children"][0]["agent"] == "b"
    assert body["cost"]["children"][0]["children"][0]["agent"] == "c"
    assert body["budget"]["spent_usd"] == "0.05"

    for name in ("a", "b", "c"):
        agents[name].daemon.tracer_provider.force_flush()
        spans = exporters[name].get_finished_spans()
        assert spans, name
        assert {format(s.context.trace_id, "032x") for s in spans} == {trace_id}, name
    names = {s.name for s in exporters["a"].get_finished_spans()}
    assert {"butler.task", "butler.delegate"} <= names
    c_task = next(s for s in exporters["c"].get_finished_spans() if s.name == "butler.task")
    assert c_task.attributes is not None
    assert list(c_task.attributes["butler.caller_chain"]) == ["a", "b"]  # type: ignore[arg-type]
    assert c_task.attributes["butler.depth"] == 2


async def test_reference_trace_header_is_honoured(mesh: Mesh, http: aiohttp.ClientSession) -> None:
    mesh.agent("home")
    agents = await mesh.start()
    trace_id = "0123456789abcdef0123456789abcdef"
    async with http.post(f"{agents['home'].url}/v2/tasks", json={"task": "t", "skill": "echo"},
                         headers={**agents["home"].headers(), "X-Swarm-Trace-ID": trace_id}) as r:
        assert (await r.json())["swarm"]["trace_id"] == trace_id


def _butler(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "butler", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, check=False)


async def test_audit_records_decisions_and_verify_detects_an_edit(
    mesh: Mesh, http: aiohttp.ClientSession
) -> None:
    mesh.agent("home", skills=[])
    mesh.agent("office", skills=[skill("x.work", "0.01")])
    mesh.link("home", "office", ["x.work"])
    agents = await mesh.start()
    home = agents["home"]
    task = await home.client().submit(TaskRequest(text="t", capabilities_needed=("x.work",)))
    assert task.state is TaskState.COMPLETED
    async with http.post(f"{home.url}/v2/tasks", headers=home.headers(),
                         json={"task": "t", "skill": "echo", "caller_chain": ["home"]}) as r:
        assert r.status == 409
    config = str(home.config_path)
    office_config = str(agents["office"].config_path)
    await mesh.close()

    tail = _butler("audit", "tail", "-c", config, "--json")
    assert tail.returncode == 0, tail.stderr
    records = [json.loads(line) for line in tail.stdout.splitlines()]
    kinds = [r["kind"] for r in records]
    assert kinds[:4] == ["inbound", "delegation_sent", "delegation_result", "task_finished"]
    assert "refusal" in kinds
    refusal = next(r for r in records if r["kind"] == "refusal")
    assert refusal["code"] == "loop_detected"
    sent = next(r for r in records if r["kind"] == "delegation_sent")
    assert sent["trace_id"] == task.trace_id and sent["decision"] == "office"
    # Delegation records name the task they work for, and the peer's task.
    assert sent["task_id"] == task.id
    result = next(r for r in records if r["kind"] == "delegation_result")
    assert result["task_id"] == task.id
    office_tail = _butler("audit", "tail", "-c", office_config, "--json")
    office_inbound = [json.loads(line) for line in office_tail.stdout.splitlines()]
    assert result["detail"]["peer_task_id"] in {
        r["task_id"] for r in office_inbound if r["kind"] == "inbound"}
    for token in home.tokens.values():
        assert token not in tail.stdout

    ok = _butler("audit", "verify", "-c", config)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "intact" in ok.stdout

    db = sqlite3.connect(home.daemon.config.data_dir / "audit.db")
    db.execute("UPDATE audit SET decision='refused' WHERE seq=1")
    db.commit()
    db.close()
    bad = _butler("audit", "verify", "-c", config)
    assert bad.returncode == 1
    assert "record 1" in bad.stdout


async def test_without_an_exporter_the_trace_still_crosses_hops(
    mesh: Mesh, http: aiohttp.ClientSession
) -> None:
    from aiohttp import web

    seen: list[dict[str, str]] = []

    async def peer(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"id": "p1", "state": "completed", "result": {"parts": [
            {"kind": "text", "text": "ok"}]}})

    app = web.Application()
    app.router.add_post("/v2/tasks", peer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        mesh.agent("home", skills=[])  # telemetry.exporter: none (the default)
        mesh.agent("office")
        mesh.link("home", "office", ["x.work"], name="far", url=url)
        agents = await mesh.start()
        for traceparent in (None, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"):
            headers = {**agents["home"].headers()}
            if traceparent:
                headers["traceparent"] = traceparent
            async with http.post(f"{agents['home'].url}/v2/tasks", headers=headers,
                                 json={"task": "t", "capabilities_needed": ["x.work"]}) as r:
                body = await r.json()
            assert body["state"] == "completed", body
            sent = seen[-1]
            trace_id = body["swarm"]["trace_id"]
            assert sent["X-Swarm-Trace-ID"] == trace_id
            assert sent["traceparent"].split("-")[1] == trace_id
            assert sent["traceparent"].endswith("-01")  # sampled: a peer that exports keeps it
            if traceparent:
                assert trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    finally:
        await runner.cleanup()
