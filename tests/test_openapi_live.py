"""The /v2 OpenAPI document against a real daemon: every operation is called with valid
and invalid requests, and every answer (status, headers, body, error code) must be one
the document describes. Every documented status is reached, except 429 and 503
(tests/test_limits.py and tests/test_rate_limits_and_metrics.py reach those)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp

from internal.protocol.a2a.server import BUTLER_V2
from tests.openapi_support import ApiDoc
from tests.support import ECHO, Instance, Swarm, command_skill, new_pair, plugin_skill

DOC = ApiDoc.packaged(BUTLER_V2)
NOT_REACHED_HERE = {429, 503}
SKILLS = [ECHO, plugin_skill("ask", "tests.plugins.sample:ask_name"),
          command_skill("slow", ["sleep", "5"]),
          {**ECHO, "id": "pricey", "capabilities": ["pricey"], "cost_usd": "2.50"},
          {**ECHO, "id": "gold", "capabilities": ["gold"], "tier": "gold"}]


class Walker:
    def __init__(self, inst: Instance, http: aiohttp.ClientSession) -> None:
        self.inst = inst
        self.http = http
        self.reached: set[tuple[str, str, int]] = set()

    async def call(self, method: str, template: str, expect: int, *, who: str | None = "operator",
                   id: str = "", headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
        hdrs = {**(self.inst.headers(who) if who else {}), **(headers or {})}
        url = self.inst.url + template.replace("{id}", id)
        async with self.http.request(method, url, headers=hdrs, **kwargs) as resp:
            status, got, body = resp.status, dict(resp.headers), await resp.read()
        return self.record(method, template, expect, status, got, body)

    def record(self, method: str, template: str, expect: int, status: int,
               headers: dict[str, str], body: bytes) -> Any:
        data = DOC.check(method, template, status, headers, body)
        assert status == expect, f"{method} {template}: {status} {body[:300]!r}"
        if status >= 400:
            assert data["error"]["code"] in DOC.error_codes(method, template, status)
        self.reached.add((method, template, status))
        return data

    async def error(self, method: str, template: str, expect: int, code: str,
                    **kwargs: Any) -> None:
        data = await self.call(method, template, expect, **kwargs)
        assert data["error"]["code"] == code, data

    async def slow_body(self, template: str, id: str = "", who: str = "operator") -> None:
        """Headers, then a body that never finishes: 408 after the body timeout."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.inst.daemon.port)
        path = template.replace("{id}", id)
        writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Authorization: {self.inst.headers(who)['Authorization']}\r\n"
                     "Content-Length: 100\r\n\r\n{".encode())
        async with asyncio.timeout(10):
            raw = await reader.read()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:])
        length = int(headers.get("Content-Length", len(body)))
        self.record("POST", template, 408, int(lines[0].split()[1]), headers, body[:length])


def sse_payloads(text: str) -> list[tuple[str, Any]]:
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if ": " in line)
        events.append((fields["event"], json.loads(fields["data"])))
    return events


async def test_every_operation_answers_as_documented(swarm: Swarm,
                                                     http: aiohttp.ClientSession) -> None:
    home = await swarm.start(
        "home", callers={"operator": {}, "other": {}, "boss": {"tier": "admin"}}, skills=SKILLS,
        extra={"server": {"max_body_bytes": 64 * 1024, "body_timeout_seconds": 0.3},
               "rate_limits": {"per_caller_per_second": 0, "per_address_per_second": 0},
               "agents": [{"id": "resident", "token_hashes": [new_pair()[1]]}]})
    w = Walker(home, http)
    huge_line = {"X-Padding": "x" * 9000}  # over aiohttp's 8190-byte header line
    long_auth = {"Authorization": "Bearer " + "x" * 5000}  # over MAX_AUTH_HEADER

    for template in ("/healthz", "/v2/openapi.json"):
        await w.call("GET", template, 200, who=None)
        await w.error("GET", template, 400, "header_too_large", who=None, headers=huge_line)
    served = await w.call("GET", "/v2/openapi.json", 200, who=None)
    assert served == DOC.doc

    assert "# TYPE" in await w.call("GET", "/metrics", 200)
    card = await w.call("GET", "/v2/card", 200)
    overview = await w.call("GET", "/v2/overview", 200, who="boss")
    assert overview["agent"]["id"] == "home" and overview["peers"] == []
    await w.error("GET", "/v2/overview", 403, "forbidden")
    listed = await w.call("GET", "/v2/overview/tasks", 200)
    assert all(t["caller"] == "operator" for t in listed["tasks"])
    assert {s["id"] for s in card["skills"]} == {"echo", "ask", "slow", "pricey"}

    # the hosted agents (docs/hosting.md)
    guest = {"id": "guest", "token_hashes": [new_pair()[1]]}
    admin, one = "/v2/admin/agents", "/v2/admin/agents/{id}"
    await w.error("GET", admin, 403, "forbidden")
    await w.error("POST", admin, 403, "forbidden", json=guest)
    assert (await w.call("POST", admin, 201, who="boss", json=guest))["source"] == "admin"
    listed = await w.call("GET", admin, 200, who="boss")
    assert [a["id"] for a in listed["agents"]] == ["resident", "guest"]
    await w.error("POST", admin, 409, "agent_exists", who="boss", json=guest)
    await w.error("POST", admin, 400, "invalid_request", who="boss", json={"id": "x"})
    await w.error("POST", admin, 400, "malformed_json", who="boss", data=b"{",
                  headers={"Content-Type": "application/json"})
    await w.error("POST", admin, 413, "payload_too_large", who="boss",
                  json={"id": "x" * 70_000})
    await w.error("POST", admin, 415, "unsupported_media_type", who="boss", data=b"hi",
                  headers={"Content-Type": "text/plain"})
    await w.slow_body(admin, who="boss")
    await w.error("DELETE", one, 403, "forbidden", id="guest")
    await w.error("DELETE", one, 400, "invalid_request", who="boss", id="resident")
    await w.call("DELETE", one, 200, who="boss", id="guest")
    await w.error("DELETE", one, 404, "not_found", who="boss", id="guest")

    # POST /v2/tasks
    done = await w.call("POST", "/v2/tasks", 200, json={"task": "hi", "skill": "echo",
                                                          "id": "t-done"})
    assert done["output"] == "hi"
    queued = await w.call("POST", "/v2/tasks", 202, json={"task": "hi", "mode": "async"})
    asking = await w.call("POST", "/v2/tasks", 200, json={"task": "hi", "skill": "ask"})
    assert asking["state"] == "input-required"
    slow = await w.call("POST", "/v2/tasks", 202, json={"task": "x", "skill": "slow",
                                                         "mode": "async"})
    for body, code in [({"task": 5}, "invalid_request"), ({"task": "x", "budget": "lots"},
                       "invalid_envelope"), ({"nope": 1}, "invalid_request")]:
        await w.error("POST", "/v2/tasks", 400, code, json=body)
    await w.error("POST", "/v2/tasks", 400, "malformed_json", data=b"{",
                  headers={"Content-Type": "application/json"})
    await w.error("POST", "/v2/tasks", 400, "invalid_envelope", json={"task": "x"},
                  headers={"X-Swarm-Depth": "3"})
    await w.error("POST", "/v2/tasks", 401, "unauthenticated", who=None, json={"task": "x"})
    await w.error("POST", "/v2/tasks", 402, "budget_exhausted",
                  json={"task": "x", "skill": "pricey", "budget": "1.00"})
    await w.error("POST", "/v2/tasks", 403, "chain_mismatch",
                  json={"task": "x", "caller_chain": ["mallory"]})
    await w.error("POST", "/v2/tasks", 403, "forbidden", json={"task": "x", "skill": "gold"})
    await w.error("POST", "/v2/tasks", 409, "loop_detected",
                  json={"task": "x", "caller_chain": ["home", "operator"]})
    await w.error("POST", "/v2/tasks", 413, "payload_too_large",
                  json={"task": "x" * 70_000})
    await w.error("POST", "/v2/tasks", 415, "unsupported_media_type", data=b"hi",
                  headers={"Content-Type": "text/plain"})
    await w.error("POST", "/v2/tasks", 422, "depth_exceeded",
                  json={"task": "x", "caller_chain": ["a", "b", "c", "d", "operator"]})
    await w.slow_body("/v2/tasks")

    # GET /v2/tasks
    page = await w.call("GET", "/v2/tasks", 200, params={"limit": "2"})
    assert len(page["tasks"]) == 2 and page["next_cursor"]
    await w.call("GET", "/v2/tasks", 200, params={"cursor": page["next_cursor"],
                                                  "state": "completed"})
    for params in ({"state": "bogus"}, {"limit": "0"}, {"cursor": "not-a-cursor"}):
        await w.error("GET", "/v2/tasks", 400, "invalid_params", params=params)

    # one task: read, answer, follow, cancel
    await w.call("GET", "/v2/tasks/{id}", 200, id=queued["id"])
    await w.error("POST", "/v2/tasks/{id}/input", 400, "invalid_request", id=asking["id"],
                  json={"task": 7})
    await w.error("POST", "/v2/tasks/{id}/input", 415, "unsupported_media_type",
                  id=asking["id"], data=b"x", headers={"Content-Type": "text/plain"})
    await w.error("POST", "/v2/tasks/{id}/input", 413, "payload_too_large", id=asking["id"],
                  json={"task": "x" * 70_000})
    await w.slow_body("/v2/tasks/{id}/input", asking["id"])
    await w.error("POST", "/v2/tasks/{id}/input", 409, "task_not_waiting", id=slow["id"],
                  json={"task": "go"})
    answered = await w.call("POST", "/v2/tasks/{id}/input", 200, id=asking["id"],
                            json={"task": "Ada"})
    assert answered["state"] == "completed"
    await w.error("POST", "/v2/tasks/{id}/input", 409, "task_terminal", id=asking["id"],
                  json={"task": "again"})
    stream = await w.call("GET", "/v2/tasks/{id}/events", 200, id=asking["id"])
    events = sse_payloads(stream)
    assert [name for name, _ in events] == ["status"]
    DOC.validator(DOC.doc["components"]["schemas"]["Task"]).validate(events[0][1])
    canceled = await w.call("POST", "/v2/tasks/{id}/cancel", 200, id=slow["id"])
    assert canceled["state"] == "canceled"
    await w.error("POST", "/v2/tasks/{id}/cancel", 409, "task_not_cancelable", id=slow["id"])

    for method, template in [("GET", "/v2/tasks/{id}"), ("POST", "/v2/tasks/{id}/cancel"),
                             ("GET", "/v2/tasks/{id}/events")]:
        await w.error(method, template, 404, "task_not_found", id="nope")
        await w.error(method, template, 404, "task_not_found", id=done["id"], who="other")
    await w.error("POST", "/v2/tasks/{id}/input", 404, "task_not_found", id="nope",
                  json={"task": "x"})

    # every operation: no token, and a token header too large
    for method, template in DOC.operations():
        if DOC.operation(method, template).get("security") == []:
            continue
        kwargs: dict[str, Any] = {"id": done["id"]}
        if method == "POST":
            kwargs["json"] = {"task": "x"}
        await w.error(method, template, 401, "unauthenticated", who=None, **kwargs)
        await w.error(method, template, 400, "header_too_large", who=None,
                      headers=long_auth, **kwargs)

    documented = {(m, t, s) for m, t in DOC.operations() for s in DOC.statuses(m, t)}
    missing = {x for x in documented - w.reached if x[2] not in NOT_REACHED_HERE}
    assert not missing, f"documented but never seen: {sorted(missing)}"
