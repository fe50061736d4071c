"""The planner from where it is used: its streamed answer on an A2A stream (the official
a2a-sdk client), and ``ctx.plan`` in a python plugin, whose plan runs local skills."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from a2a.types import StreamResponse, TaskState

from tests.a2a_support import sdk_client, send_request, text, user_message
from tests.llm_server import Reply, call, chat_server
from tests.support import ECHO, Swarm, plugin_skill, post_task
from tests.test_planner import PLAN, _planner

ANSWER = ("The lights are off in every room.\nThe front door is locked, and the garage "
          "door is closed; nothing else needs doing tonight.")


async def test_the_answer_streams_to_an_a2a_stream_in_chunks(swarm: Swarm,
                                                              tmp_path: Path) -> None:
    async with chat_server(
        Reply(stream=True, tool_calls=(call("echo", {"text": "lights?"}),)),
        Reply(stream=True, content=ANSWER),
    ) as server:
        home = await swarm.start("home", skills=[ECHO, PLAN],
                                 extra={"planner": _planner(tmp_path, server.url)})
        async with sdk_client(home, streaming=True) as client:
            events: list[StreamResponse] = [e async for e in client.send_message(send_request(
                user_message(text("is the house ready for the night?"),
                             metadata={"skill": "plan"})))]

    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert len(chunks) >= 2
    assert {c.artifact.name for c in chunks} == {"answer"}
    assert [c.append for c in chunks] == [False] + [True] * (len(chunks) - 1)
    assert [c.last_chunk for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert "".join(p.text for c in chunks for p in c.artifact.parts) == ANSWER
    final = events[-1].status_update.status if events[-1].HasField("status_update") \
        else events[-1].task.status
    assert final.state == TaskState.TASK_STATE_COMPLETED


async def test_a_plugin_plans_with_ctx_plan_and_local_skills(swarm: Swarm,
                                                              tmp_path: Path) -> None:
    async with chat_server(
        Reply(tool_calls=(call("echo", {"text": "first"}), call("memory_write",
                                                                {"text": "remember this"}))),
        Reply(content="both done"),
    ) as server:
        home = await swarm.start("home", skills=[
            ECHO, {"id": "memory.write", "builtin": "memory.write", "expose": True,
                   "cost_usd": "0.01"},
            plugin_skill("organise", "tests.plugins.planning:plan_and_report",
                         cost_usd="0.001")],
            extra={"planner": _planner(tmp_path, server.url)})
        status, body = await post_task(home, {"task": "echo then note", "skill": "organise",
                                              "budget": "1"})
    assert status == 200 and body["state"] == "completed", body
    said, data = body["result"]["parts"]
    assert said["text"] == "planned: both done"
    assert data["data"]["steps"] == 2
    assert data["data"]["tool_calls"] == ["echo", "memory.write"]
    names = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert names == ["echo", "memory_write"]  # not the plugin itself: it is running
    # The plugin's own cost, the memory skill's, and two model calls at 0.00014.
    assert Decimal(body["budget"]["spent_usd"]) == Decimal("0.011") + Decimal("0.00028")
    assert [c["skill"] for c in body["cost"]["children"]] == [
        "planner:test-model", "echo", "memory.write", "planner:test-model"]
    # Nothing was streamed: a plugin composes its own answer.
    assert body["result"]["artifacts"] == []
