"""A2A 1.0 over HTTP+JSON: the official a2a-sdk REST client, and the status mapping."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import (
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    TaskNotFoundError,
    TaskState,
)

from tests.a2a_support import (
    ASK,
    WAIT,
    cancel_a_waiting_task,
    plain_message,
    rpc,
    sdk_client,
    send_request,
    send_task,
    text,
    user_message,
)
from tests.support import ECHO, Instance, Swarm

V1 = {"A2A-Version": "1.0"}


async def call(inst: Instance, method: str, path: str, *, body: Any = None,
               headers: dict[str, str] | None = None, data: bytes | None = None,
               ) -> tuple[int, Any, Any]:
    hdrs = {**inst.headers(), **V1, **(headers or {})}
    kwargs: dict[str, Any] = {"data": data} if data is not None else {"json": body}
    async with inst.session.request(method, inst.url + path, headers=hdrs, **kwargs) as resp:
        return resp.status, resp.headers, await resp.json(content_type=None)


def reason(body: dict[str, Any]) -> str:
    return str(body["error"]["details"][0]["reason"])


async def test_sdk_rest_client_send_get_list_cancel(swarm: Swarm) -> None:
    home = await swarm.start("home", callers={"operator": {}, "vip": {"tier": "gold"}},
                             skills=[ECHO, WAIT, {**ECHO, "id": "gold", "tier": "gold"}])
    async with sdk_client(home, binding="HTTP+JSON") as client:
        task = await send_task(client, send_request(user_message(text("echo hello"))))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.artifacts[-1].parts[0].text == "echo hello"
        got = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
        assert got.id == task.id and len(got.history) == 1
        page = await client.list_tasks(ListTasksRequest(page_size=10))
        assert [t.id for t in page.tasks] == [task.id] and page.next_page_token == ""
        await cancel_a_waiting_task(client, home)
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="nope"))
    async with sdk_client(home, "vip", binding="HTTP+JSON") as client:
        card = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
        assert sorted(s.id for s in card.skills) == ["echo", "gold", "wait"]


async def test_rest_and_json_rpc_answer_the_same(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK])
    # "echo": the words route it to echo (a word no skill has would fail no_capable_skill)
    params = {"message": plain_message("echo same"), "configuration": {"historyLength": 3}}
    _, body = await rpc(home, "SendMessage", params)
    via_rpc = body["result"]["task"]
    status, headers, via_rest = await call(home, "POST", "/message:send", body={
        "message": plain_message("echo same"), "configuration": {"historyLength": 3}})
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    via_rest = via_rest["task"]

    def shape(task: dict[str, Any]) -> Any:
        return {k: v for k, v in task.items() if k not in ("id", "contextId", "metadata")} | {
            "status": {"state": task["status"]["state"]},
            "artifacts": [a["parts"] for a in task["artifacts"]],
            "history": [(m["role"], m["parts"]) for m in task["history"]]}

    assert shape(via_rest) == shape(via_rpc)
    _, _, got = await call(home, "GET", f"/tasks/{via_rest['id']}?historyLength=0")
    assert got["id"] == via_rest["id"] and "history" not in got
    _, _, page = await call(home, "GET", "/tasks?pageSize=1&includeArtifacts=true")
    assert page["pageSize"] == 1 and page["totalSize"] == 2 and page["nextPageToken"]
    assert page["tasks"][0]["artifacts"]
    _, _, page = await call(home, "GET", f"/tasks?pageSize=1&pageToken={page['nextPageToken']}"
                                         "&status=TASK_STATE_COMPLETED")
    assert len(page["tasks"]) == 1 and page["nextPageToken"] == ""


async def test_rest_status_mapping(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK])
    status, _, body = await call(home, "GET", "/tasks/missing")
    assert status == 404 and reason(body) == "TASK_NOT_FOUND"
    assert body["error"]["code"] == 404 and body["error"]["status"] == "NOT_FOUND"
    _, _, sent = await call(home, "POST", "/message:send", body={"message": plain_message()})
    task_id = sent["task"]["id"]
    status, _, body = await call(home, "POST", f"/tasks/{task_id}:cancel")
    assert status == 409 and reason(body) == "TASK_NOT_CANCELABLE"
    status, _, body = await call(home, "GET", f"/tasks/{task_id}:subscribe")
    assert status == 400 and reason(body) == "UNSUPPORTED_OPERATION"
    status, _, body = await call(home, "POST", "/message:send", body={
        "message": plain_message(taskId=task_id)})
    assert status == 400 and reason(body) == "UNSUPPORTED_OPERATION"
    status, _, body = await call(home, "POST", "/message:send", body={"message": {}})
    assert status == 400 and reason(body) == "INVALID_PARAMS"
    status, _, body = await call(home, "POST", "/message:send", data=b"{oops",
                                 headers={"Content-Type": "application/json"})
    assert status == 400 and reason(body) == "INVALID_REQUEST"
    status, _, body = await call(home, "POST", "/message:send", data=b"hello",
                                 headers={"Content-Type": "text/plain"})
    assert status == 415 and reason(body) == "CONTENT_TYPE_NOT_SUPPORTED"
    status, _, body = await call(home, "GET", "/tasks?status=TASK_STATE_NAPPING")
    assert status == 400 and reason(body) == "INVALID_PARAMS"
    status, _, body = await call(home, "GET", "/tasks", headers={"A2A-Version": "0.3"})
    assert status == 400 and reason(body) == "VERSION_NOT_SUPPORTED"
    status, _, body = await call(home, "DELETE", "/tasks")
    assert status == 405 and body["error"]["code"] == 405
    async with home.session.get(home.url + "/tasks", headers=V1) as resp:
        assert resp.status == 401 and resp.headers["WWW-Authenticate"].startswith("Bearer")
        assert reason(await resp.json(content_type=None)) == "UNAUTHENTICATED"


GOOGLE_RPC_CODES = {
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED"}


def assert_aip193(status: int, headers: Any, body: Any) -> None:
    """An AIP-193 error (A2A 11.6): exactly code, status, message and ErrorInfo details."""
    assert headers["Content-Type"].startswith("application/json"), headers["Content-Type"]
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "status", "message", "details"}
    assert error["code"] == status and error["status"] in GOOGLE_RPC_CODES
    assert isinstance(error["message"], str) and error["message"]
    (info,) = error["details"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert info["reason"] and info["reason"] == info["reason"].upper()
    assert info["domain"] in ("a2a-protocol.org", "butler")
    assert all(isinstance(v, str) for v in info["metadata"].values())


async def test_every_http_json_error_is_aip193_json(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO, ASK])
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/tasks/missing", {}),
        ("POST", "/message:send", {"body": {"message": {}}}),
        ("POST", "/message:send", {"data": b"{oops",
                                   "headers": {"Content-Type": "application/json"}}),
        ("POST", "/message:send", {"data": b"hello", "headers": {"Content-Type": "text/plain"}}),
        ("POST", "/message:send", {"data": b'{"message": 1}',
                                   "headers": {"Content-Type": "application/a2a+json"}}),
        ("POST", "/message:send", {"data": b"[" * 100_000 + b"]" * 100_000,
                                   "headers": {"Content-Type": "application/json"}}),
        ("GET", "/tasks", {"headers": {"A2A-Version": "0.3"}}),
        ("DELETE", "/tasks", {}),
        ("GET", "/tasks", {"headers": {"Authorization": "Bearer wrong"}}),
    ]
    for method, path, kwargs in cases:
        status, headers, body = await call(home, method, path, **kwargs)
        assert status >= 400, (method, path)
        assert_aip193(status, headers, body)
    status, headers, body = await call(home, "POST", "/message:send", data=b"{}" + b" " * 3,
                                       headers={"Content-Type": "application/a2a+json"})
    assert status == 400  # a+json bodies are read as JSON: the missing message is the error
    assert_aip193(status, headers, body)
