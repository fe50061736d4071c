"""Bad input on the A2A JSON-RPC endpoint: the specification's error for each, never a 500."""

from __future__ import annotations

from typing import Any

import pytest

from tests.a2a_support import JSONRPC, error_reason, plain_message, rpc
from tests.support import Instance, Swarm


@pytest.fixture
async def home(swarm: Swarm) -> Instance:
    return await swarm.start("home")


async def raw(home: Instance, body: bytes, headers: dict[str, str] | None = None
              ) -> tuple[int, Any]:
    hdrs = {**home.headers(), "A2A-Version": "1.0", **(headers or {})}
    async with home.session.post(home.url + JSONRPC, data=body, headers=hdrs) as resp:
        return resp.status, await resp.json(content_type=None)


@pytest.mark.parametrize(("body", "code"), [
    (b"{not json", -32700),
    (b"", -32700),
    (b'{"jsonrpc": "2.0", "id": 1, "method": NaN}', -32700),
    (b"[]", -32600),
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}]', -32600),
    (b'"just a string"', -32600),
    (b'{"jsonrpc": "1.0", "id": 1, "method": "GetTask"}', -32600),
    (b'{"id": 1, "method": "GetTask"}', -32600),
    (b'{"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "x"}}', -32600),
    (b'{"jsonrpc": "2.0", "id": true, "method": "GetTask"}', -32600),
    (b'{"jsonrpc": "2.0", "id": 1, "method": 7}', -32600),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/list"}', -32601),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod"}', -32601),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": ["x"]}', -32602),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": 5}}', -32602),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}}', -32602),
])
async def test_json_rpc_errors(home: Instance, body: bytes, code: int) -> None:
    status, answer = await raw(home, body)
    assert status == 200, answer
    assert answer["jsonrpc"] == "2.0" and answer["error"]["code"] == code, answer
    assert "result" not in answer


async def test_error_keeps_the_request_id_and_carries_error_info(home: Instance) -> None:
    status, body = await rpc(home, "GetTask", {"id": "missing"}, request_id="abc")
    assert status == 200 and body["id"] == "abc"
    error = body["error"]
    assert error["code"] == -32001 and error_reason(error) == "TASK_NOT_FOUND"
    assert error["data"][0]["domain"] == "a2a-protocol.org"
    assert error["data"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"


@pytest.mark.parametrize(("version", "ok"), [
    ("1.0", True), ("1.0.1", True), (None, False), ("", False), ("0.3", False),
    ("2.0", False), ("1.1", False), ("banana", False),
])
async def test_a2a_version_negotiation(home: Instance, version: str | None, ok: bool) -> None:
    status, body = await rpc(home, "GetExtendedAgentCard", {}, version=version)
    assert status == 200
    if ok:
        assert body["result"]["name"] == "home butler"
    else:
        assert body["error"]["code"] == -32009
        assert error_reason(body["error"]) == "VERSION_NOT_SUPPORTED"


@pytest.mark.parametrize("params", [
    {"message": plain_message(role="ROLE_ROBOT")},
    {"message": plain_message(role="ROLE_AGENT")},
    {"message": {"role": "ROLE_USER", "parts": [{"text": "x"}]}},  # no messageId
    {"message": plain_message(parts=[])},
    {"message": plain_message(parts=[{"text": "a", "url": "http://x"}])},
    {"message": plain_message(parts=[{"raw": "***"}])},
    {"message": plain_message(parts=[{"data": [1, 2]}])},
    {"message": plain_message(), "configuration": {"historyLength": -1}},
    {"message": plain_message(), "configuration": {"historyLength": 10**12}},
    {"message": plain_message(), "configuration": {"returnImmediately": "yes"}},
    {"message": plain_message(metadata={"skill": "echo"},
                              parts=[{"data": {"capabilities": "echo"}}])},
    {"message": "hello"},
    {},
])
async def test_invalid_send_params(home: Instance, params: dict[str, Any]) -> None:
    status, body = await rpc(home, "SendMessage", params)
    assert status == 200 and body["error"]["code"] == -32602, body


@pytest.mark.parametrize("params", [
    {"status": "TASK_STATE_SLEEPING"}, {"status": 99}, {"pageSize": 0}, {"pageSize": 101},
    {"pageToken": "garbage!"}, {"historyLength": -5}, {"statusTimestampAfter": "yesterday"},
    {"includeArtifacts": "maybe"},
])
async def test_invalid_list_params(home: Instance, params: dict[str, Any]) -> None:
    status, body = await rpc(home, "ListTasks", params)
    assert status == 200 and body["error"]["code"] == -32602, body


async def test_auth_errors_keep_their_http_status_with_a_json_rpc_body(home: Instance) -> None:
    async with home.session.post(home.url + JSONRPC, json={
            "jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
            headers={"A2A-Version": "1.0"}) as resp:
        assert resp.status == 401 and "Bearer" in resp.headers["WWW-Authenticate"]
        body = await resp.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["error"]["code"] == -31401 and error_reason(body["error"]) == "UNAUTHENTICATED"
    async with home.session.get(home.url + JSONRPC, headers=home.headers()) as resp:
        assert resp.status == 405 and (await resp.json())["error"]["code"] == -32601


async def test_huge_request_and_deep_json(swarm: Swarm) -> None:
    home = await swarm.start("home", extra={"server": {"max_body_bytes": 2048}})
    status, body = await raw(home, b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", '
                                   b'"params": {"id": "' + b"x" * 4096 + b'"}}')
    assert status == 200 and body["error"]["code"] == -32600
    status, body = await raw(home, b"[" * 100 + b"]" * 100)
    assert status == 200 and body["error"]["code"] == -32600
