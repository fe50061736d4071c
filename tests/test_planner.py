"""The LLM planner against a scripted OpenAI-compatible server on port 0 (tests/llm_server):
plans across peers through the one delegation path, the budget reserved before each model
call, and every way the endpoint can fail ending the task with a clear code."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from butler.audit import AuditLog
from butler.config import ConfigError, parse_config
from butler.planner.plan import price, worst_case_tokens
from butler.planner.wire import StreamedAnswer, ToolCall, Usage
from butler.skills.base import SkillFailed
from tests.delegation_support import Mesh, skill
from tests.llm_server import ChatServer, Reply, call, chat_server
from tests.support import Instance, Swarm, post_task

PLAN = {"id": "plan", "builtin": "planner", "expose": True, "name": "Planner",
        "tags": ["plan", "several steps"]}
ACTION_ITEMS = skill("office.action_items", "0.03", description="Pending action items")
DOORS = skill("garage.doors", "0.02", description="Whether the garage doors are closed")
TOKEN = "sk-test-planner-token-1234567890"
# usage (100 in, 20 out) at these prices: 0.0001 + 0.00004
PRICES = {"price_per_1k_input_usd": "0.001", "price_per_1k_output_usd": "0.002"}
CALL_COST = Decimal("0.00014")


def _planner(tmp: Path, url: str, **extra: Any) -> dict[str, Any]:
    token_file = tmp / "llm.token"
    token_file.write_text(TOKEN)
    return {"url": url, "model": "test-model", "token_file": str(token_file), **PRICES,
            **extra}


def _home_office_garage(mesh: Mesh, tmp: Path, server: ChatServer, **planner: Any) -> None:
    mesh.agent("home", skills=[PLAN], extra={"planner": _planner(tmp, server.url, **planner)})
    mesh.agent("office", skills=[ACTION_ITEMS])
    mesh.agent("garage", skills=[DOORS])
    mesh.link("home", "office", ["office.action_items"])
    mesh.link("home", "garage", ["garage.doors"])


async def _plan(http: aiohttp.ClientSession, home: Instance, text: str,
                budget: str = "0.50") -> dict[str, Any]:
    async with http.post(f"{home.url}/v2/tasks", headers=home.headers(),
                         json={"task": text, "skill": "plan", "budget": budget}) as resp:
        body: dict[str, Any] = await resp.json()
        assert resp.status == 200, body
        return body


async def _audit(inst: Instance) -> list[dict[str, Any]]:
    """The records of a stopped instance (a blocking read, so on a thread)."""
    def read() -> list[dict[str, Any]]:
        with AuditLog(inst.daemon.config.data_dir / "audit.db") as log:
            return [r.to_json() for r in log.iter_all()]
    return await asyncio.to_thread(read)


def _answer(body: dict[str, Any]) -> str:
    [answer] = [a for a in body["result"]["artifacts"] if a["name"] == "answer"]
    return "".join(p["text"] for p in answer["parts"])


async def test_a_two_step_plan_across_two_peers(mesh: Mesh, http: aiohttp.ClientSession,
                                                tmp_path: Path) -> None:
    async with chat_server(
        Reply(tool_calls=(call("a2a_delegate", {"peer": "office", "skill":
                                                "office.action_items",
                                                "task": "pending action items"}),)),
        Reply(stream=True, tool_calls=(call("a2a_delegate", {
            "peer": "garage", "skill": "garage.doors", "task": "is the door closed"}),)),
        Reply(stream=True, content="Two action items are pending, and the door is closed."),
    ) as server:
        _home_office_garage(mesh, tmp_path, server)
        agents = await mesh.start()
        home = agents["home"]
        body = await _plan(http, home, "any action items, and is the garage closed?")
        async with http.get(f"{home.url}/metrics", headers=home.headers()) as resp:
            metrics = await resp.text()
        await mesh.close()

    assert body["state"] == "completed", body
    assert _answer(body) == "Two action items are pending, and the door is closed."
    spent = Decimal("0.03") + Decimal("0.02") + 3 * CALL_COST
    assert Decimal(body["budget"]["spent_usd"]) == spent
    hops = [(c["agent"], c["skill"], Decimal(c["cost_usd"])) for c in body["cost"]["children"]]
    model = ("home", "planner:test-model", CALL_COST)
    assert hops == [model, ("office", "office.action_items", Decimal("0.03")), model,
                    ("garage", "garage.doors", Decimal("0.02")), model]

    # What the model was offered and told, on the real wire.
    first, second, third = server.requests
    [tool] = first["tools"]
    assert tool["function"]["name"] == "a2a_delegate"
    assert tool["function"]["parameters"]["properties"]["peer"]["enum"] == ["office", "garage"]
    assert first["model"] == "test-model" and first["stream"] is True
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_a2a_delegate",
                                      "content": "pending action items"}
    assert third["messages"][-1]["content"] == "is the door closed"
    assert {h["Authorization"] for h in server.headers} == {f"Bearer {TOKEN}"}

    assert 'butler_planner_calls_total{outcome="ok"} 3' in metrics
    assert 'butler_planner_tokens_total{direction="input"} 300' in metrics
    assert 'butler_planner_tokens_total{direction="output"} 60' in metrics

    records = await _audit(home)
    kinds = [r["kind"] for r in records]
    assert kinds.count("planner_call") == 3 and kinds.count("planner_tool") == 2
    assert kinds.count("delegation_sent") == 2
    tools = [r for r in records if r["kind"] == "planner_tool"]
    assert [(r["detail"]["peer"], r["decision"]) for r in tools] == [
        ("office", "completed"), ("garage", "completed")]
    assert all(r["task_id"] == body["id"] for r in tools)
    [finished] = [r for r in records if r["kind"] == "task_finished"]
    assert finished["detail"]["peer"] == "office,garage"  # not home's own model calls
    assert TOKEN not in json.dumps(records)


async def test_a_model_call_that_could_overspend_is_never_made(
        mesh: Mesh, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    """The first call fits the budget; after the office's 0.03 the second call's worst case
    (its request's size plus max_tokens, priced) does not: refused before it is sent."""
    async with chat_server(
        Reply(tool_calls=(call("a2a_delegate", {"peer": "office", "task": "items"}),)),
        Reply(content="never sent"),
    ) as server:
        # A call's worst case: about 1k tokens in (0.001) and 1k out (0.02); it costs
        # 0.0005. After the first call and the office, 0.0145 is left: not enough.
        _home_office_garage(mesh, tmp_path, server, max_tokens=1000,
                            price_per_1k_output_usd="0.02")
        agents = await mesh.start()
        body = await _plan(http, agents["home"], "items please", budget="0.045")

    assert body["state"] == "failed"
    assert body["error"]["code"] == "budget_exhausted", body["error"]
    assert "model call 2" in body["error"]["message"]
    assert len(server.requests) == 1
    assert Decimal(body["budget"]["spent_usd"]) == Decimal("0.0305")


async def test_a_malformed_tool_call_fails_the_task_before_any_tool_runs(
        mesh: Mesh, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    async with chat_server(
        Reply(tool_calls=(call("a2a_delegate", {"peer": "office", "task": "x"}),
                          call("a2a_delegate", '{"peer": "garage", "task": '))),
    ) as server:
        _home_office_garage(mesh, tmp_path, server)
        agents = await mesh.start()
        body = await _plan(http, agents["home"], "two things")
        office = agents["office"].daemon.engine.store
        page = await office.list_tasks(owner=None, state=None, context_id=None, cursor=None,
                                       limit=10)

    assert body["state"] == "failed"
    assert body["error"]["code"] == "planner_bad_response"
    assert "not JSON" in body["error"]["message"]
    assert page.tasks == ()  # the well-formed first call did not run either
    assert Decimal(body["budget"]["spent_usd"]) == CALL_COST


async def test_a_hanging_endpoint_fails_the_task_within_its_deadline(
        mesh: Mesh, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    async with chat_server(Reply(hang=True)) as server:
        _home_office_garage(mesh, tmp_path, server, timeout_seconds=0.3)
        agents = await mesh.start()
        body = await _plan(http, agents["home"], "anything")
    assert body["state"] == "failed"
    assert body["error"]["code"] == "planner_unavailable", body["error"]
    assert len(server.requests) == 1
    # The endpoint had the request and may have billed it: the reservation is charged
    # (it was 0 before issue 35, which let a hanging endpoint run for free).
    assert Decimal(body["budget"]["spent_usd"]) > 0


async def test_a_hanging_endpoint_never_outlives_the_task(swarm: Swarm, tmp_path: Path) -> None:
    """The planner may wait 30 s for a call, but this task has 0.3 s: its deadline wins."""
    async with chat_server(Reply(hang=True)) as server:
        home = await swarm.start("home", skills=[PLAN], extra={
            "planner": _planner(tmp_path, server.url, timeout_seconds=30)})
        status, body = await post_task(home, {"task": "x", "skill": "plan",
                                              "timeout_seconds": 0.3})
    assert status == 200 and body["state"] == "failed", body
    assert body["error"]["code"] in ("planner_unavailable", "task_timeout")


async def test_an_endpoint_that_is_down_or_answers_garbage(
        mesh: Mesh, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    async with chat_server(Reply(raw=b"{not json"), Reply(status=500)) as server:
        _home_office_garage(mesh, tmp_path, server)
        agents = await mesh.start()
        home = agents["home"]
        garbage = await _plan(http, home, "anything")
        failing = await _plan(http, home, "anything")
    down = await _plan(http, home, "anything")  # the server has stopped: refused
    assert (garbage["error"]["code"], failing["error"]["code"], down["error"]["code"]) == (
        "planner_bad_response", "planner_unavailable", "planner_unavailable")
    assert "HTTP 500: scripted failure for Bearer [token]" in failing["error"]["message"]
    assert "cannot connect to the planner endpoint" in down["error"]["message"]


async def test_a_loop_attempt_is_refused(mesh: Mesh, http: aiohttp.ClientSession,
                                         tmp_path: Path) -> None:
    """home asks office's planner; office's model tries to hand the task back to home,
    which is in the chain: refused as a loop, home is never called back. A model that
    repeats a call is stopped too."""
    async with chat_server(
        Reply(tool_calls=(call("a2a_delegate", {"peer": "home", "task": "you do it"}),)),
        Reply(tool_calls=(call("office_action_items", {"text": "items"}),)),
        Reply(tool_calls=(call("office_action_items", {"text": "items"}),)),
    ) as server:
        mesh.agent("home", skills=[])
        mesh.agent("office", skills=[PLAN, ACTION_ITEMS],
                   extra={"planner": _planner(tmp_path, server.url)})
        mesh.agent("garage", skills=[DOORS])
        mesh.link("home", "office", ["planner"])
        mesh.link("office", "home", ["echo"])
        mesh.link("office", "garage", ["garage.doors"])
        agents = await mesh.start()
        home, office = agents["home"], agents["office"]
        async with http.post(f"{home.url}/v2/tasks", headers=home.headers(),
                             json={"task": "plan it", "capabilities_needed": ["planner"]}) as r:
            looped = await r.json()
        repeated = await _plan(http, office, "items, twice")
        await mesh.close()
        inbound = [r for r in await _audit(home) if r["kind"] == "inbound"]

    assert looped["state"] == "failed"
    assert looped["error"]["code"] == "loop_detected", looped["error"]
    assert len(inbound) == 1  # only the task the operator sent
    [offered] = [t["function"] for t in server.requests[0]["tools"]
                 if t["function"]["name"] == "a2a_delegate"]
    assert offered["parameters"]["properties"]["peer"]["enum"] == ["garage"]  # not home
    assert repeated["state"] == "failed"
    assert repeated["error"]["code"] == "planner_loop"
    # The first call ran once; the repeat did not.
    assert [c["skill"] for c in repeated["cost"]["children"]] == [
        "planner:test-model", "office.action_items", "planner:test-model"]


def test_the_planner_section_is_checked_and_its_token_never_shown(tmp_path: Path) -> None:
    def load(planner: dict[str, Any] | None, env: dict[str, str] | None = None) -> Any:
        doc: dict[str, Any] = {"skills": [PLAN]}
        if planner is not None:
            doc["planner"] = planner
        return parse_config(json.dumps(doc), file="p.yaml", env=env or {}, base_dir=tmp_path)

    with pytest.raises(ConfigError, match=r"p.yaml: skills\[0\]: the planner skill needs a "
                                          "planner: section"):
        load(None)
    with pytest.raises(ConfigError, match="planner: the planner needs model"):
        load({"url": "http://127.0.0.1:11434/v1/chat/completions"})
    with pytest.raises(ConfigError, match=r"planner\.token_env: environment variable LLM_KEY"):
        load({"url": "https://api.example.com/v1/chat/completions", "model": "m",
              "token_env": "LLM_KEY"})
    cfg = load({"url": "https://api.example.com/v1/chat/completions", "model": "m",
                "token_env": "LLM_KEY", "price_per_1k_input_usd": "0.00015"},
               {"LLM_KEY": TOKEN})
    assert cfg.planner is not None
    assert cfg.planner.token == TOKEN and TOKEN not in repr(cfg)
    assert cfg.planner.price_per_1k_input_usd == Decimal("0.00015")
    assert "LLM_KEY" in cfg.secret_env  # never in a command skill's environment


async def test_an_answer_without_usage_is_charged_its_whole_reservation(
        swarm: Swarm, tmp_path: Path) -> None:
    async with chat_server(Reply(content="done", usage=None)) as server:
        home = await swarm.start("home", skills=[PLAN],
                                 extra={"planner": _planner(tmp_path, server.url)})
        status, body = await post_task(home, {"task": "x", "skill": "plan", "budget": "1"})
    assert status == 200 and body["state"] == "completed", body
    [sent] = server.requests
    cfg = home.daemon.config.planner
    assert cfg is not None
    reserved = price(cfg, worst_case_tokens(sent["messages"], sent.get("tools", [])), 1024)
    assert Decimal(body["budget"]["spent_usd"]) == reserved > 0


def test_streamed_chunks_add_up_as_servers_send_them() -> None:
    """A whole tool call in one delta with its arguments as an object (as some servers
    send it), text in pieces, usage in a last chunk without choices."""
    answer = StreamedAnswer()
    chunks = [
        {"choices": [{"delta": {"role": "assistant", "content": "Let me "}}]},
        {"choices": [{"delta": {"content": "check."}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {
            "name": "memory_search", "arguments": {"text": "keys"}}}]}}]},
        {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5}},
    ]
    assert [answer.feed(json.dumps(c)) for c in chunks] == ["Let me ", "check.", "", ""]
    answer.feed("[DONE]")
    assert answer.done
    done = answer.completion()
    assert done.content == "Let me check." and done.usage == Usage(12, 5)
    assert done.tool_calls == (ToolCall("c1", "memory_search", '{"text": "keys"}'),)
    with pytest.raises(SkillFailed, match="not JSON"):
        StreamedAnswer().feed("{nope")


async def test_the_tools_are_what_the_caller_may_reach(mesh: Mesh, http: aiohttp.ClientSession,
                                                       tmp_path: Path) -> None:
    """A skill of another tier is never offered; a caller whose grants lack a2a.delegate
    gets no peers, and only the skills its grants name."""
    secret = {**skill("vault.open"), "tier": "family"}
    async with chat_server(Reply(content="ok"), Reply(content="ok")) as server:
        mesh.agent("home", skills=[PLAN, skill("echo.more"), skill("lights"), secret],
                   extra={"planner": _planner(tmp_path, server.url)},
                   callers={"guest": {"limits": {"skills": ["plan", "lights"]}}})
        mesh.agent("office", skills=[ACTION_ITEMS])
        mesh.link("home", "office", ["office.action_items"])
        agents = await mesh.start()
        home = agents["home"]
        for who in ("operator", "guest"):
            async with http.post(f"{home.url}/v2/tasks", headers=home.headers(who),
                                 json={"task": "x", "skill": "plan"}) as resp:
                assert (await resp.json())["state"] == "completed"
    operator, guest = ([t["function"]["name"] for t in r["tools"]] for r in server.requests)
    assert operator == ["echo_more", "lights", "a2a_delegate"]
    assert guest == ["lights"]


async def test_a_peer_the_model_was_not_offered_is_refused(
        mesh: Mesh, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    """The model's arguments are its words, not a grant: a caller granted only the garage's
    capability cannot reach the office by having the model name it."""
    async with chat_server(Reply(tool_calls=(
            call("a2a_delegate", {"peer": "office", "task": "items"}),))) as server:
        mesh.agent("home", skills=[PLAN], extra={"planner": _planner(tmp_path, server.url)},
                   callers={"guest": {"limits": {"skills": ["plan", "a2a.delegate"],
                                                 "capabilities": ["garage.doors"]}}})
        mesh.agent("office", skills=[ACTION_ITEMS])
        mesh.agent("garage", skills=[DOORS])
        mesh.link("home", "office", ["office.action_items"])
        mesh.link("home", "garage", ["garage.doors"])
        agents = await mesh.start()
        home = agents["home"]
        async with http.post(f"{home.url}/v2/tasks", headers=home.headers("guest"),
                             json={"task": "items", "skill": "plan"}) as resp:
            body = await resp.json()
        office = agents["office"].daemon.engine.store
        page = await office.list_tasks(owner=None, state=None, context_id=None, cursor=None,
                                       limit=10)
    offered = server.requests[0]["tools"][-1]["function"]["parameters"]["properties"]
    assert offered["peer"]["enum"] == ["garage"]
    assert page.tasks == ()  # the office never saw a task
    # The refusal went back to the model as the call's result, as a tool's failure does.
    told = server.requests[1]["messages"][-1]
    assert told["role"] == "tool" and "planner_bad_response" in told["content"]
    assert "'office'" in told["content"] and "not among the peers" in told["content"]
    assert body["state"] == "completed"


async def test_a_tool_that_raises_is_in_the_audit_trail(swarm: Swarm, tmp_path: Path) -> None:
    """A plugin's own exception ends the plan as it ends any run, and its call is still one
    planner_tool record beside the model's call."""
    from tests.support import plugin_skill

    boom = plugin_skill("boom", "tests.plugins.sample:explode", expose=True)
    async with chat_server(Reply(tool_calls=(call("boom", {"text": "go"}),))) as server:
        home = await swarm.start("home", skills=[PLAN, boom], extra={
            "planner": _planner(tmp_path, server.url)})
        status, body = await post_task(home, {"task": "x", "skill": "plan"})
        await swarm.stop(home)
    assert status == 200 and body["state"] == "failed", body
    tools = [r for r in await _audit(home) if r["kind"] == "planner_tool"]
    assert [(r["decision"], r["code"]) for r in tools] == [("error", "internal_error")]


async def test_when_unsure_the_planner_decides_among_the_routers_shortlist(
        mesh: Mesh, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    """planner.when: unsure: a task in plain words the router declines goes to the planner
    skill, whose model sees the router's shortlist for it (here 2), with each skill's
    name, tags and examples, not every skill."""
    lamp = {**skill("lamp"), "name": "Lamp", "tags": ["lamp", "light"],
            "examples": ["dim the lamp"]}
    heat = {**skill("heating"), "name": "Heating", "tags": ["heating", "warm"]}
    others = [{**skill(f"other{n}"), "name": f"Other {n}", "tags": [f"thing{n}"]}
              for n in range(6)]
    async with chat_server(Reply(content="the lamp, I think")) as server:
        mesh.agent("home", skills=[PLAN, lamp, heat, *others], extra={
            "planner": _planner(tmp_path, server.url, when="unsure", shortlist=2)})
        agents = await mesh.start()
        home = agents["home"]
        # "light" and "warm" both match, by one word each: a close call or a decline.
        async with http.post(f"{home.url}/v2/tasks", headers=home.headers(),
                             json={"task": "a warm light on the desk, something cosy"}) as r:
            body = await r.json()
    assert body["state"] == "completed", body
    assert len(server.requests) == 1
    tools = {t["function"]["name"]: t["function"]["description"]
             for t in server.requests[0]["tools"]}
    assert set(tools) == {"lamp", "heating"}
    assert "tags: lamp, light" in tools["lamp"] and '"dim the lamp"' in tools["lamp"]


def test_planner_when_and_shortlist_are_checked(tmp_path: Path) -> None:
    for bad_value in ({"when": "sometimes"}, {"shortlist": 0}):
        doc = {"skills": [PLAN], "planner": {"url": "http://127.0.0.1:1/v1", "model": "m",
                                             **bad_value}}
        with pytest.raises(ConfigError, match=f"planner.{next(iter(bad_value))}"):
            parse_config(json.dumps(doc), file="p.yaml", env={}, base_dir=tmp_path)
