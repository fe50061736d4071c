"""Multi-turn delegation with the official SDK servers as peers (issue 34, 2 and 7): the
peer's executor asks "how loud?"; the Butler's caller sees the question, answers it on
the binding it speaks, and the answer reaches the peer's task on the binding the Butler
chose (JSON-RPC 1.0, HTTP+JSON, gRPC, JSON-RPC 0.3), streaming or not."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.a2a_support import rpc
from tests.delegation_support import butler_with_peer
from tests.sdk03_support import sdk03_agent
from tests.sdk_agent import sdk_agent
from tests.support import Instance, Swarm, new_pair, post_task

NEEDS_GRPC = pytest.mark.skipif(importlib.util.find_spec("grpc") is None,
                                reason="gRPC needs the grpc extra (pip install 'butler-a2a[grpc]')")


async def answer_v2(home: Instance, task_id: str, text: str) -> dict[str, Any]:
    async with home.session.post(f"{home.url}/v2/tasks/{task_id}/input", json={"task": text},
                                 headers=home.headers()) as resp:
        assert resp.status == 200, await resp.text()
        body: dict[str, Any] = await resp.json()
        return body


@pytest.mark.parametrize(("binding", "version", "streaming"), [
    ("JSONRPC", "1.0", True), ("JSONRPC", "1.0", False), ("HTTP+JSON", "1.0", True),
    ("HTTP+JSON", "1.0", False), ("JSONRPC", "0.3", False),
    pytest.param("GRPC", "1.0", True, marks=NEEDS_GRPC),
    pytest.param("GRPC", "1.0", False, marks=NEEDS_GRPC),
])
async def test_an_sdk_peers_question_is_answered_by_the_butlers_caller(
        swarm: Swarm, binding: str, version: str, streaming: bool) -> None:
    token, _ = new_pair()
    async with sdk_agent(token, binding=binding, version=version, streaming=streaming,
                         reply="ask") as agent:
        home = await butler_with_peer(swarm, agent.url, token, cost_usd="0.10")
        status, task = await post_task(home, {"task": "hello", "capabilities_needed": ["shout"]})
        assert status == 200 and task["state"] == "input-required", task
        assert task["status"]["message"] == "how loud?"
        assert task["status"]["asked_by"] == "shouter"
        assert task["budget"]["spent_usd"] == "0"  # nothing is charged for a question

        done = await answer_v2(home, task["id"], "very loud")
        assert done["state"] == "completed", done
        assert done["output"] == "VERY LOUD"
        assert done["budget"]["spent_usd"] == "0.10"  # charged once, for the whole talk
        # The answer went to the peer's own task, in its context.
        first, answer = agent.seen.messages[0], agent.seen.messages[1]
        assert answer.task_id and answer.context_id == first.context_id
        assert answer.parts[0].text == "very loud"


async def test_an_sdk_0_3_peer_asks_and_is_answered(swarm: Swarm, sdk03: Path) -> None:
    token, _ = new_pair()
    async with sdk03_agent(sdk03, token, mode="ask") as url:
        home = await butler_with_peer(swarm, url, token)
        status, task = await post_task(home, {"task": "hello", "capabilities_needed": ["shout"]})
        assert status == 200 and task["state"] == "input-required", task
        assert task["status"]["message"] == "how loud?"
        done = await answer_v2(home, task["id"], "louder")
        assert done["state"] == "completed" and done["output"] == "LOUDER", done


@pytest.mark.parametrize("caller_binding", ["JSONRPC 1.0", "JSONRPC 0.3", "HTTP+JSON"])
async def test_the_caller_answers_on_its_own_binding(swarm: Swarm, caller_binding: str) -> None:
    token, _ = new_pair()
    async with sdk_agent(token, reply="ask") as agent:
        home = await butler_with_peer(swarm, agent.url, token)
        _, task = await post_task(home, {"task": "hello", "capabilities_needed": ["shout"]})
        assert task["state"] == "input-required", task
        message_id = uuid.uuid4().hex
        if caller_binding == "JSONRPC 1.0":
            _, body = await rpc(home, "SendMessage", {"message": {
                "messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "soft"}],
                "taskId": task["id"], "contextId": task["context_id"]}})
            assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", body
        elif caller_binding == "JSONRPC 0.3":
            _, body = await rpc(home, "message/send", {"message": {
                "kind": "message", "messageId": message_id, "role": "user",
                "parts": [{"kind": "text", "text": "soft"}], "taskId": task["id"]}},
                version=None)
            assert body["result"]["status"]["state"] == "completed", body
        else:
            async with home.session.post(
                    f"{home.url}/message:send", headers={**home.headers(), "A2A-Version": "1.0"},
                    json={"message": {"messageId": message_id, "role": "ROLE_USER",
                                      "parts": [{"text": "soft"}], "taskId": task["id"]}}) as resp:
                body = await resp.json()
            assert body["task"]["status"]["state"] == "TASK_STATE_COMPLETED", body
        assert agent.seen.messages[1].parts[0].text == "soft"


@NEEDS_GRPC
async def test_the_caller_answers_over_grpc(swarm: Swarm) -> None:
    from a2a.types import Message, Part, Role, SendMessageRequest, TaskState

    from tests.grpc_support import grpc_client

    token, _ = new_pair()
    async with sdk_agent(token, reply="ask") as agent:
        home = await butler_with_peer(swarm, agent.url, token,
                                      configurations={"a2a": {"grpc_port": 0}})
        _, task = await post_task(home, {"task": "hello", "capabilities_needed": ["shout"]})
        assert task["state"] == "input-required", task
        async with grpc_client(home) as client:
            answer = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER,
                             parts=[Part(text="soft")], task_id=task["id"])
            events = [e async for e in client.send_message(SendMessageRequest(message=answer))]
        assert events[-1].task.status.state == TaskState.TASK_STATE_COMPLETED, events
        assert agent.seen.messages[1].parts[0].text == "soft"


@pytest.mark.parametrize(("binding", "streaming"), [
    ("JSONRPC", True), ("HTTP+JSON", False),
    pytest.param("GRPC", True, marks=NEEDS_GRPC),
])
async def test_a_streaming_caller_sees_the_sdk_peers_work_after_its_answer(
        swarm: Swarm, binding: str, streaming: bool) -> None:
    """Requirement 3: once answered, the peer's status and artifact reach the Butler's
    streaming caller as the peer sends them (its stream, or polling when it has none),
    marked with the peer they came from."""
    token, _ = new_pair()
    async with sdk_agent(token, binding=binding, streaming=streaming, reply="ask") as agent:
        home = await butler_with_peer(swarm, agent.url, token)
        _, task = await post_task(home, {"task": "hello", "capabilities_needed": ["shout"]})
        assert task["state"] == "input-required", task
        seen: list[tuple[str, dict[str, Any]]] = []
        async for kind, data in home.client().events(task["id"]):
            seen.append((kind, data))
            if len(seen) == 1:  # following the task: now the answer
                async with home.session.post(
                        f"{home.url}/v2/tasks/{task['id']}/input",
                        json={"task": "soft", "mode": "async"}, headers=home.headers()) as resp:
                    assert resp.status == 200
        states = [(d["state"], d["status"]["message"]) for k, d in seen if k == "status"]
        assert ("working", "input received") in states
        if streaming:  # a stream's status and artifact updates, relayed as they came
            assert ("working", "[shouter] shouting") in states
            chunks = [d["artifact"] for k, d in seen if k == "artifact"]
            assert chunks and chunks[0]["parts"][0]["text"] == "SOFT"
            assert chunks[0]["source"] == "shouter"
        assert seen[-1][1]["state"] == "completed" and seen[-1][1]["output"] == "SOFT"
