"""Delegation as a conversation across hops (issue 34, requirement 2): a peer's question
becomes the delegating task's own state, the caller's answer goes on to the peer's task,
for as many turns and hops as it takes; Butler peers on loopback."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry.trace import NoOpTracer

from butler.delegation.delegator import PeerDelegator
from butler.delegation.peers import Candidate
from internal.protocol.a2a.model import (
    DelegationFailed,
    PeerTask,
    Refusal,
    TaskRequest,
    TaskState,
)
from tests.audit_support import audit_records
from tests.delegation_support import Mesh
from tests.support import wait_until

SURVEY = {"id": "survey", "python": "tests.plugins.questions:survey", "expose": True,
          "capabilities": ["lab.survey"]}
NAG = {"id": "nag", "python": "tests.plugins.questions:nag", "expose": True,
       "capabilities": ["lab.nag"]}


def three_hops(mesh: Mesh, capability: str, lab_skill: dict[str, Any],
               home_swarm: dict[str, Any] | None = None) -> None:
    """home -> office -> lab, only lab doing the work."""
    admin = {"operator": {"bound": False, "tier": "admin"}}  # lists every caller's tasks
    mesh.agent("home", skills=[], swarm=home_swarm)
    mesh.agent("office", skills=[], callers=admin)
    mesh.agent("lab", skills=[lab_skill], callers=admin)
    mesh.link("home", "office", [capability])
    mesh.link("office", "lab", [capability])


async def office_and_lab_tasks(mesh: Mesh) -> tuple[dict[str, Any], dict[str, Any]]:
    """The one task office and lab each have (their operators list them)."""
    found = []
    for name in ("office", "lab"):
        listing = await mesh.instances[name].client().list_tasks()
        assert len(listing["tasks"]) == 1, listing
        found.append(listing["tasks"][0])
    return found[0], found[1]


async def test_lab_asks_twice_and_home_answers_each_question(mesh: Mesh) -> None:
    three_hops(mesh, "lab.survey", SURVEY)
    agents = await mesh.start()
    home = agents["home"].client()

    asked = await home.submit(TaskRequest(text="paint", capabilities_needed=("lab.survey",)))
    assert asked.state is TaskState.INPUT_REQUIRED
    assert asked.status_message == "which colour?"
    assert asked.asked_by == "lab"  # two hops down, not office
    office, lab = await office_and_lab_tasks(mesh)
    assert office["state"] == lab["state"] == "input-required"
    assert office["status"]["asked_by"] == "lab" and "asked_by" not in lab["status"]

    signing = await home.answer(asked.id, "teal")
    assert signing.state is TaskState.AUTH_REQUIRED
    assert signing.status_message == "sign off the mix" and signing.asked_by == "lab"

    done = await home.answer(asked.id, "ada")
    assert done.state is TaskState.COMPLETED, done.error
    assert done.parts[0].text == "teal paint, signed by ada"
    assert done.asked_by == ""
    office, lab = await office_and_lab_tasks(mesh)
    assert office["state"] == lab["state"] == "completed"
    # One delegation each, however many turns: one child in each cost tree.
    assert done.cost is not None and [c.agent for c in done.cost.children] == ["office"]
    assert [c["agent"] for c in office["cost"]["children"]] == ["lab"]


async def test_an_answer_to_a_task_not_waiting_is_refused_and_changes_nothing(
        mesh: Mesh, http: aiohttp.ClientSession) -> None:
    three_hops(mesh, "lab.survey", SURVEY)
    agents = await mesh.start()
    home = agents["home"]
    asked = await home.client().submit(
        TaskRequest(text="paint", capabilities_needed=("lab.survey",)))
    signing = await home.client().answer(asked.id, "teal")
    assert signing.state is TaskState.AUTH_REQUIRED
    done = await home.client().answer(asked.id, "ada")
    assert done.state is TaskState.COMPLETED

    async with http.post(f"{home.url}/v2/tasks/{asked.id}/input", json={"task": "again"},
                         headers=home.headers()) as resp:
        assert resp.status == 409
        assert (await resp.json())["error"]["code"] == "task_terminal"
    after = await home.client().get(asked.id)
    assert after.state is TaskState.COMPLETED and after.history == done.history
    office, lab = await office_and_lab_tasks(mesh)
    assert office["state"] == lab["state"] == "completed"


async def test_a_peer_that_asks_forever_is_bounded_by_the_waiting_limit(mesh: Mesh) -> None:
    three_hops(mesh, "lab.nag", NAG, home_swarm={"input_wait_seconds": 2})
    agents = await mesh.start()
    home = agents["home"].client()
    asked = await home.submit(TaskRequest(text="go", capabilities_needed=("lab.nag",)))
    for _ in range(3):  # as many turns as it takes
        assert asked.state is TaskState.INPUT_REQUIRED and asked.asked_by == "lab"
        asked = await home.answer(asked.id, "yes")
    assert asked.state is TaskState.INPUT_REQUIRED
    ended = await home.get(asked.id)
    while not ended.state.terminal:  # nobody answers: the waiting limit ends it
        async for _ in home.events(asked.id):
            pass
        ended = await home.get(asked.id)
    assert ended.state is TaskState.FAILED
    assert ended.error is not None and ended.error.code == "input_timeout"
    assert "lab's question" in ended.error.message and "2s" in ended.error.message
    await wait_until(lambda: both_canceled(mesh), what="office's and lab's tasks canceled")


async def both_canceled(mesh: Mesh) -> bool:
    office, lab = await office_and_lab_tasks(mesh)
    return bool(office["state"] == lab["state"] == "canceled")


async def test_a_cancel_while_lab_asks_cancels_office_and_lab(mesh: Mesh) -> None:
    """The person cancels instead of answering: the question no longer waits anywhere."""
    three_hops(mesh, "lab.survey", SURVEY)
    agents = dict(await mesh.start())  # a copy: the close empties the mesh's own
    home = agents["home"].client()
    asked = await home.submit(TaskRequest(text="paint", capabilities_needed=("lab.survey",)))
    assert asked.state is TaskState.INPUT_REQUIRED and asked.asked_by == "lab"
    office, lab = await office_and_lab_tasks(mesh)
    assert office["state"] == lab["state"] == "input-required"

    assert (await home.cancel(asked.id)).state is TaskState.CANCELED
    await wait_until(lambda: both_canceled(mesh), what="office's and lab's tasks canceled")
    await mesh.close()
    for agent, peer, peer_task in (("home", "office", office), ("office", "lab", lab)):
        (record,) = await audit_records(agents[agent].daemon, "delegation_canceled")
        assert record.decision == "canceled" and record.detail["peer"] == peer, record
        assert record.detail["peer_task_id"] == peer_task["id"]


STORY = {"id": "story", "python": "tests.plugins.questions:story", "expose": True,
         "capabilities": ["lab.story"]}


async def test_a_streaming_caller_sees_each_hops_progress_as_it_comes(
        mesh: Mesh, tmp_path: Path) -> None:
    """Requirement 3: lab's status and its artifact's chunks reach home's streaming
    caller while lab works, marked with the hop they came from."""
    three_hops(mesh, "lab.story", STORY)
    agents = await mesh.start()
    home = agents["home"].client()
    gate = tmp_path / "gate"
    task = await home.submit(TaskRequest(text="tell", capabilities_needed=("lab.story",),
                                         input={"gate": str(gate)}, blocking=False))
    seen: list[tuple[str, dict[str, Any]]] = []
    async for kind, data in home.events(task.id):
        seen.append((kind, data))
        if kind == "status" and data["status"]["message"] == "[office] [lab] drafting":
            gate.touch()  # lab finishes only once its progress has reached home
    messages = [d["status"]["message"] for k, d in seen if k == "status"]
    assert "[office] [lab] finishing" in messages
    chunks = [d for k, d in seen if k == "artifact"]
    assert chunks and chunks[-1]["append"] is True
    assert chunks[-1]["artifact"]["parts"] == [{"kind": "text", "text": "upon a time."}]
    assert chunks[-1]["artifact"]["source"] == "lab"
    final = seen[-1][1]
    assert final["state"] == "completed" and final["output"] == "told"
    (story,) = final["result"]["artifacts"]  # the whole artifact, once
    assert [p["text"] for p in story["parts"]] == ["Once ", "upon a time."]
    assert story["source"] == "lab" and story["name"] == "story"


async def test_each_turn_is_checked_for_loop_budget_and_peer_like_the_first() -> None:
    """An answer goes on only to a peer this task may still call: refused before anything
    is sent (nothing listens at the peer's address)."""
    lab = Candidate("lab", "http://127.0.0.1:9", "t", ("lab.survey",), cost_usd=Decimal("0.50"))
    delegator = PeerDelegator(agent_id="office", static=[lab], tracer=NoOpTracer(),
                              audit=lambda *_, **__: None, max_concurrency=1)
    deadline = time.monotonic() + 5
    answer = TaskRequest(text="teal")
    try:
        with pytest.raises(Refusal) as refused:
            await delegator.resume(peer_task=PeerTask("lab", "t1"), chain=("home", "LAB"),
                                   budget=Decimal("1"), request=answer, deadline=deadline)
        assert refused.value.code == "loop_detected"
        with pytest.raises(Refusal) as refused:
            await delegator.resume(peer_task=PeerTask("lab", "t1"), chain=("home",),
                                   budget=Decimal("0.10"), request=answer, deadline=deadline)
        assert refused.value.code == "budget_exhausted"
        with pytest.raises(DelegationFailed) as failed:
            await delegator.resume(peer_task=PeerTask("gone", "t1"), chain=("home",),
                                   budget=Decimal("1"), request=answer, deadline=deadline)
        assert failed.value.code == "no_capable_peer"
    finally:
        await delegator.aclose()
