"""A2A 1.0 over JSON-RPC: the official a2a-sdk client against a real Butler."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Part,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
)
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct

from tests.a2a_support import (
    ASK,
    WAIT,
    rpc,
    sdk_client,
    send_request,
    send_task,
    text,
    user_message,
)
from tests.support import ECHO, Swarm, wait_task


def data_part(value: dict[str, Any]) -> Part:
    struct = Struct()
    struct.update(value)
    part = Part()
    part.data.struct_value.CopyFrom(struct)
    return part


async def test_send_get_and_list_with_the_sdk_client(swarm: Swarm) -> None:
    home = await swarm.start("home")
    async with sdk_client(home) as client:
        events = [e async for e in client.send_message(send_request(user_message(
            text("hello")), history_length=5))]
        assert len(events) == 1 and events[0].HasField("task")
        task = events[0].task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.context_id and task.id
        assert [p.text for a in task.artifacts for p in a.parts] == ["hello"]
        assert task.artifacts[-1].artifact_id == f"{task.id}-result"
        assert [m.parts[0].text for m in task.history] == ["hello"]
        assert task.history[0].role == 1

        got = await client.get_task(GetTaskRequest(id=task.id, history_length=0))
        assert got.id == task.id and not got.history
        assert got.status.state == TaskState.TASK_STATE_COMPLETED

        # The same task is visible on Butler's own binding.
        assert (await wait_task(home, task.id))["output"] == "hello"

        for word in ("two", "three"):
            async for _ in client.send_message(send_request(user_message(
                    text(word), context_id=task.context_id))):
                pass
        page = await client.list_tasks(ListTasksRequest(page_size=2))
        assert page.total_size == 3 and page.page_size == 2 and len(page.tasks) == 2
        assert page.next_page_token
        assert not page.tasks[0].artifacts  # includeArtifacts defaults to false
        rest = await client.list_tasks(ListTasksRequest(page_size=2,
                                                        page_token=page.next_page_token))
        assert len(rest.tasks) == 1 and rest.next_page_token == ""
        ids = [t.id for t in page.tasks] + [t.id for t in rest.tasks]
        assert len(set(ids)) == 3 and ids[-1] == task.id  # latest update first
        same = await client.list_tasks(ListTasksRequest(context_id=task.context_id,
                                                        include_artifacts=True))
        assert same.total_size == 3 and all(t.artifacts for t in same.tasks)
        done = await client.list_tasks(ListTasksRequest(
            status=TaskState.TASK_STATE_WORKING))
        assert done.total_size == 0 and done.next_page_token == ""


async def test_skill_choice_from_the_message(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[
        ECHO, {"id": "about", "python": "tests.plugins.sample:about", "expose": True,
               "capabilities": ["about.me"]}])
    async with sdk_client(home) as client:
        async def run(*parts: Part, **kwargs: object) -> tuple[str, dict[str, Any]]:
            request = send_request(user_message(*parts, **kwargs))  # type: ignore[arg-type]
            task = await send_task(client, request)
            meta = MessageToDict(task.metadata)["urn:butler:a2a:ext:swarm:v1"]
            result = task.artifacts[-1].parts
            data = MessageToDict(result[0].data.struct_value) if result[0].HasField("data") else {}
            return str(meta["skill"]), data

        skill_id, data = await run(data_part({"skill": "about", "input": {"k": "v"}}))
        assert skill_id == "about" and data["input"] == {"k": "v"}
        skill_id, _ = await run(text("hi"), data_part({"capabilities": ["about.me"]}))
        assert skill_id == "about"
        skill_id, _ = await run(text("hi"), metadata={"skill": "about"})
        assert skill_id == "about"
        # Naming neither: the intent router chooses by the words (issue 20); a text of
        # greetings only is declined, never sent to the first skill (issue 35).
        skill_id, _ = await run(text("echo this back"))
        assert skill_id == "echo"
        hello = await send_task(client, send_request(user_message(text("hello"))))
        assert hello.status.state == TaskState.TASK_STATE_FAILED


async def test_cancel_and_task_errors(swarm: Swarm) -> None:
    home = await swarm.start("home", callers={"operator": {}, "other": {}}, skills=[ECHO, WAIT])
    async with sdk_client(home) as client:
        request = send_request(user_message(text("x"), metadata={"skill": "wait"}),
                               return_immediately=True)
        task = await send_task(client, request)
        assert task.status.state in (TaskState.TASK_STATE_SUBMITTED,
                                     TaskState.TASK_STATE_WORKING)
        await wait_task(home, task.id, {"working"}, message="waiting")
        canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
    async with sdk_client(home, "other") as client:  # another caller's task looks missing
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=task.id))


async def test_follow_up_resumes_an_input_required_task(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK])
    async with sdk_client(home) as client:
        first = await send_task(client, send_request(user_message(
            text("hi"), metadata={"skill": "ask"})))
        assert first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert first.status.message.parts[0].text == "what is your name?"
        answer = user_message(text("Ada"), task_id=first.id)
        done = await send_task(client, send_request(answer))
        assert done.id == first.id and done.context_id == first.context_id
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert done.artifacts[-1].parts[0].text == "hello Ada"
        roles = [(m.role, m.parts[0].text) for m in done.history]
        assert roles == [(1, "hi"), (2, "what is your name?"), (1, "Ada"),
                         (2, "input received")]


async def test_follow_up_rules(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK])
    status, body = await rpc(home, "SendMessage", {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}],
        "metadata": {"skill": "ask"}}})
    task = body["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

    def reply(**extra: object) -> dict[str, object]:
        return {"message": {"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "Ada"}],
                            "taskId": task["id"], **extra}}

    status, body = await rpc(home, "SendMessage", reply(contextId="another-context"))
    assert body["error"]["code"] == -32602 and "contextId" in body["error"]["message"]
    status, body = await rpc(home, "SendMessage", reply(contextId=task["contextId"]))
    assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    status, body = await rpc(home, "SendMessage", reply())
    assert status == 200 and body["error"]["code"] == -32004  # terminal: no more messages
    status, body = await rpc(home, "SendMessage", {"message": {
        "messageId": "m3", "role": "ROLE_USER", "parts": [{"text": "x"}], "taskId": "nope"}})
    assert body["error"]["code"] == -32001


async def test_blocking_returns_at_input_required_and_immediately_returns_at_once(
    swarm: Swarm,
) -> None:
    home = await swarm.start("home", skills=[ECHO, WAIT])
    # The wait skill runs until canceled: an answer at all is one before it finished.
    _, body = await rpc(home, "SendMessage", {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "x"}],
                    "metadata": {"skill": "wait"}},
        "configuration": {"returnImmediately": True}})
    state = body["result"]["task"]["status"]["state"]
    assert state in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    _, body = await rpc(home, "CancelTask", {"id": body["result"]["task"]["id"]})
    assert body["result"]["status"]["state"] == "TASK_STATE_CANCELED"


async def test_fields_under_their_proto_names_are_read_too(swarm: Swarm) -> None:
    # proto3 JSON parsers accept a field's original snake_case name as well as its
    # lowerCamelCase one; some clients send the former.
    home = await swarm.start("home", skills=[ECHO, ASK])
    status, body = await rpc(home, "SendMessage", {"message": {
        "message_id": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}],
        "context_id": "ctx-snake", "metadata": {"skill": "ask"}}})
    task = body["result"]["task"]
    assert status == 200 and task["contextId"] == "ctx-snake"
    for _ in range(2):  # the second time, every name is converted from the cache
        status, body = await rpc(home, "SendMessage", {"message": {
            "message_id": "m2", "role": "ROLE_USER", "parts": [{"text": "Ada"}],
            "task_id": task["id"], "context_id": "another-context"}})
        assert body["error"]["code"] == -32602 and "contextId" in body["error"]["message"]


async def test_a_trailing_slash_on_the_json_rpc_url(swarm: Swarm) -> None:
    """Clients that join a base URL and a path send ``/a2a/jsonrpc/``: the official client
    with such a card, and the JSON-RPC error shape for a bad request there."""
    home = await swarm.start("home")
    headers = {"Authorization": f"Bearer {home.tokens['operator']}"}
    async with httpx.AsyncClient(headers=headers, timeout=20) as http:
        card = await A2ACardResolver(http, home.url).get_agent_card()
        for interface in card.supported_interfaces:
            interface.url = interface.url.rstrip("/") + "/"
        assert any(i.url.endswith("/a2a/jsonrpc/") for i in card.supported_interfaces)
        config = ClientConfig(httpx_client=http, streaming=False,
                              supported_protocol_bindings=["JSONRPC"])
        client = ClientFactory(config).create(card)
        try:
            task = await send_task(client, send_request(user_message(text("slash"))))
        finally:
            await client.close()
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    async with home.session.post(home.url + "/a2a/jsonrpc/", data=b"{oops", headers={
            **home.headers(), "A2A-Version": "1.0", "Content-Type": "application/json"}) as resp:
        body = await resp.json()
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32700
