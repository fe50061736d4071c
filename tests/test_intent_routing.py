"""Tasks in plain words on real daemons: home routes to the office skill or peer that the
words point at, through the same swarm rules as any delegation, or refuses saying what
came closest."""

from __future__ import annotations

import asyncio
import os
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from butler.routing import DEFAULT_THRESHOLD
from internal.protocol.a2a.model import TaskRequest, TaskState
from tests.delegation_support import Mesh, skill
from tests.support import ECHO, REPO, Swarm, config_dict, post_task

ACTION_ITEMS = skill("office.action_items", "0.03", name="Action items",
                     description="Pending action items and to-dos from office meetings",
                     tags=["action items", "todo", "follow-ups"],
                     examples=["any pending action items from the team meeting"])
PRINTER = skill("office.printer", "0.02", name="Office printer", tags=["printer", "print"],
                description="Print documents on the office printer")
LIGHTS = skill("home.lights", "0.01", name="Lights", tags=["lights", "lamp"],
               description="Turn the lights of the house on or off")
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _home_and_office(mesh: Mesh, **home: Any) -> None:
    mesh.agent("home", skills=[LIGHTS], **home)
    mesh.agent("office", skills=[ACTION_ITEMS, PRINTER, skill("memory.search")])
    # home's entry declares only a capability: the card tells it what office can do.
    mesh.link("home", "office", ["memory.search"])


async def test_home_routes_plain_words_to_the_office_skill_with_chain_budget_and_trace(
        mesh: Mesh, http: aiohttp.ClientSession) -> None:
    _home_and_office(mesh)
    agents = await mesh.start()
    home, office = agents["home"], agents["office"]
    async with http.post(f"{home.url}/v2/tasks", headers={
            **home.headers(), "traceparent": TRACEPARENT},
            json={"task": "check with my office for pending action items",
                  "budget": "0.50"}) as resp:
        body = await resp.json()
    assert resp.status == 200, body
    assert body["state"] == "completed", body
    assert body["skill"] == "a2a.delegate"
    assert body["result"]["parts"][0]["text"] == "check with my office for pending action items"
    assert body["budget"] == {"start_usd": "0.50", "spent_usd": "0.03", "left_usd": "0.47"}
    [hop] = body["cost"]["children"]
    assert (hop["agent"], hop["skill"], hop["cost_usd"]) == (
        "office", "office.action_items", "0.03")
    trace_id = TRACEPARENT.split("-")[1]
    assert body["swarm"]["trace_id"] == trace_id

    page = await office.daemon.engine.store.list_tasks(
        owner=None, state=None, context_id=None, cursor=None, limit=10)
    [there] = page.tasks
    assert there.chain == ("home",) and there.trace_id == trace_id
    assert there.skill == "office.action_items" and there.owner == "home"
    assert there.budget is not None and there.budget.start_usd == Decimal("0.50")


async def test_a_local_skill_wins_when_the_words_are_for_it(mesh: Mesh) -> None:
    _home_and_office(mesh)
    agents = await mesh.start()
    task = await agents["home"].client().submit(TaskRequest(text="turn off the lights"))
    assert task.state is TaskState.COMPLETED and task.skill == "home.lights"


async def test_the_peer_and_a_word_of_its_card_reach_that_skill(mesh: Mesh) -> None:
    _home_and_office(mesh)
    agents = await mesh.start()
    task = await agents["home"].client().submit(
        TaskRequest(text="ask my office to print the minutes"))
    assert task.state is TaskState.COMPLETED
    assert task.cost is not None and task.cost.children[0].skill == "office.printer"


async def test_naming_only_the_peer_lets_the_peer_route_the_words(mesh: Mesh) -> None:
    _home_and_office(mesh)
    agents = await mesh.start()
    # Only "office" matches: home sends the text to office as a whole, naming no skill.
    # Office reads it without its own name, finds nothing about budgets, and says so.
    task = await agents["home"].client().submit(
        TaskRequest(text="ask my office about the budget"))
    assert task.state is TaskState.FAILED
    assert task.error is not None and task.error.code == "no_capable_skill"
    # Office declines: nothing of its own fits (with the semantic stage, below the
    # threshold; without it, no word of the task is on its cards).
    assert task.error.message.startswith("office: no skill or peer ")
    assert task.cost is not None and task.cost.children[0].agent == "office"


async def test_words_nothing_matches_fail_with_the_closest_candidates(mesh: Mesh) -> None:
    _home_and_office(mesh)
    agents = await mesh.start()
    task = await agents["home"].client().submit(
        TaskRequest(text="what is the pollen count in the garden"))
    assert task.state is TaskState.FAILED
    assert task.error is not None and task.error.code == "no_capable_skill"
    # Below the threshold (closest: ...), or, without the semantic stage, no word of it
    # on any card: either way the message says why.
    assert ("closest: " in task.error.message
            and f"threshold {DEFAULT_THRESHOLD:g}" in task.error.message) \
        or "no word of the task is on any card" in task.error.message
    assert task.cost is None or not task.cost.children  # no peer was called


async def test_a_routed_delegation_obeys_depth_and_budget(mesh: Mesh,
                                                         http: aiohttp.ClientSession) -> None:
    _home_and_office(mesh, swarm={"max_depth": 0})
    agents = await mesh.start()
    home = agents["home"]
    async with http.post(f"{home.url}/v2/tasks", headers=home.headers(),
                         json={"task": "pending action items at the office"}) as resp:
        body = await resp.json()
    assert resp.status == 422 and body["error"]["code"] == "depth_exceeded"


async def test_a_routed_delegation_is_refused_when_the_budget_is_too_small(
        mesh: Mesh, http: aiohttp.ClientSession) -> None:
    mesh.agent("home", skills=[LIGHTS])
    mesh.agent("office", skills=[ACTION_ITEMS])
    mesh.link("home", "office", ["office.action_items"], cost_usd="0.10")
    agents = await mesh.start()
    home = agents["home"]
    async with http.post(f"{home.url}/v2/tasks", headers=home.headers(), json={
            "task": "pending action items at the office", "budget": "0.05"}) as resp:
        body = await resp.json()
    assert resp.status == 402 and body["error"]["code"] == "budget_exhausted"
    page = await agents["office"].daemon.engine.store.list_tasks(
        owner=None, state=None, context_id=None, cursor=None, limit=10)
    assert page.tasks == ()  # office was never called


async def test_words_never_reach_what_the_callers_grants_do_not(mesh: Mesh) -> None:
    """A caller limited to some skills or capabilities cannot reach others by plain
    words: they are not candidates at all (not a 403 after choosing them)."""
    _home_and_office(mesh, callers={
        "kid": {"bound": False, "limits": {"skills": ["home.lights"]}},
        "guest": {"bound": False, "limits": {"capabilities": ["home.lights"]}},
        "clerk": {"bound": False, "limits": {"skills": ["a2a.delegate"],
                                             "capabilities": ["office.printer"]}}})
    agents = await mesh.start()
    home = agents["home"]
    for who in ("kid", "guest"):
        task = await home.client(who).submit(
            TaskRequest(text="check with my office for pending action items"))
        assert task.state is TaskState.FAILED, who
        assert task.error is not None and task.error.code == "no_capable_skill", who
        assert "office" not in task.error.message, who
        lights = await home.client(who).submit(TaskRequest(text="turn the lights off"))
        assert lights.skill == "home.lights", who
    # clerk may delegate, for the printer only: the action items are out of its reach.
    task = await home.client("clerk").submit(
        TaskRequest(text="print the pending action items at the office"))
    assert task.state is TaskState.COMPLETED, task.error
    assert task.cost is not None and task.cost.children[0].skill == "office.printer"


async def test_the_peer_in_the_chain_is_never_routed_back_to(mesh: Mesh) -> None:
    mesh.agent("home", skills=[LIGHTS])
    mesh.agent("office", skills=[skill("office.misc", name="Odds and ends")])
    mesh.link("home", "office", ["office.misc"])
    mesh.link("office", "home", ["home.lights"])
    agents = await mesh.start()
    office = agents["office"]
    # From its operator, office sends "lights" on to home, whose card has the skill...
    task = await office.client().submit(TaskRequest(text="turn on the lights"))
    assert task.state is TaskState.COMPLETED
    assert task.cost is not None and task.cost.children[0].skill == "home.lights"
    # ...but a task home sent (home is in its chain) never goes back to home.
    back = await office.client("home").submit(TaskRequest(text="turn on the lights"))
    assert back.state is TaskState.FAILED
    assert back.error is not None and back.error.code == "no_capable_skill"
    assert "home" not in back.error.message.split("closest:")[1]


async def test_a_plugin_asks_the_router_and_delegates_to_its_choice(mesh: Mesh) -> None:
    mesh.agent("home", skills=[{"id": "where", "python": "tests.plugins.routing:where",
                                "expose": True}])
    mesh.agent("office", skills=[ACTION_ITEMS])
    mesh.link("home", "office", ["office.action_items"])
    agents = await mesh.start()
    task = await agents["home"].client().submit(TaskRequest(
        text="", skill="where", input={"ask": "any pending action items from my office?"}))
    assert task.state is TaskState.COMPLETED, task.error
    explained = task.parts[0].text or ""
    assert "chosen: office/office.action_items" in explained
    data = task.parts[1].data or {}
    assert data["peer"] == "office" and data["state"] == "completed"
    assert data["ranked"][0]["label"] == "office/office.action_items"
    assert DEFAULT_THRESHOLD <= data["ranked"][0]["score"] <= 1


async def _butler_route(*args: str) -> tuple[int, str, str]:
    # The offline config's peer reads its token from the environment.
    env = {**os.environ, "HOME_TO_OFFICE": "t" * 43}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "butler", "route", *args, cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_cli_route_explain_reads_the_peers_cards(mesh: Mesh) -> None:
    _home_and_office(mesh)
    agents = await mesh.start()
    config = str(agents["home"].config_path)
    code, out, err = await _butler_route(
        "check with my office for pending action items", "--explain", "--cards", "-c", config)
    assert code == 0, err
    assert "1. office/office.action_items  confidence " in out
    assert "'action' in name/tags/id" in out and "names peer 'office' (+0.15)" in out
    assert out.rstrip().endswith("chosen: office/office.action_items")


async def test_cli_route_offline_uses_the_config_and_its_threshold(tmp_path: Path) -> None:
    cfg, _ = config_dict(tmp_path, "home", skills=[LIGHTS], peers=[{
        "name": "office", "url": "http://127.0.0.1:9", "token_env": "HOME_TO_OFFICE",
        "capabilities": ["action_items"]}])
    path = tmp_path / "home.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code, out, _ = await _butler_route("lights off please", "-c", str(path))
    assert code == 0 and out.splitlines()[0].startswith("1. home.lights  ")
    assert out.rstrip().endswith("chosen: home.lights")
    code, out, _ = await _butler_route("check my office action items", "--explain",
                                       "-c", str(path))
    assert code == 0 and "chosen: office (peer)" in out  # by the entry's name and capability
    code, out, _ = await _butler_route("what is the pollen count in the garden", "-c",
                                       str(path))
    assert code == 1
    assert "chosen: none (no_capable_skill): " in out
    cfg["configurations"]["swarm"]["routing_threshold"] = 1.0  # a confidence never reaches 1
    path.write_text(yaml.safe_dump(cfg))
    code, out, _ = await _butler_route("the lights in the hall and the porch", "-c",
                                       str(path))
    assert code == 1 and "closest: home.lights" in out


async def test_skills_a_provider_adds_later_are_routed_to(swarm: Swarm) -> None:
    """An MCP server's tools arrive after start (and change with each restart of it): the
    router's index is rebuilt when the catalog changes, not kept from the first task."""
    from butler.config.model import SkillConfig
    from butler.skills.catalog import Skill

    home = await swarm.start("home", skills=[ECHO, LIGHTS])
    status, before = await post_task(home, {"task": "what does the weather station say"})
    assert status == 200 and before.get("error", {}).get("code") == "no_capable_skill", before

    async def station(ctx: Any) -> str:
        return "sunny"

    config = SkillConfig(id="weather.station", name="Weather station",
                         description="the weather station's readings",
                         capabilities=("weather.station",), expose=True)
    home.daemon.catalog.provide("weather", [Skill(config, station)])
    status, after = await post_task(home, {"task": "what does the weather station say"})
    assert status == 200 and after["state"] == "completed", after
    assert after["skill"] == "weather.station"
