"""Text that is not Unicode, on every binding: a lone surrogate escape (``"\\ud800"``)
is refused with 400 / -32602 before anything is stored, never a 500; odd encodings of
the body are clear 4xx answers; the daemon keeps serving and nothing half-stored shows."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from tests.support import ECHO, Instance, Swarm

LONE = ["\\ud800", "\\udfff", "x\\udc80y", "\\ud83d"]  # JSON escapes, as a client sends them


def jsonrpc(method: str, params: str) -> str:
    return '{"jsonrpc": "2.0", "id": 1, "method": "' + method + '", "params": ' + params + "}"


def bodies(escape: str) -> list[tuple[str, str, dict[str, str], bytes]]:
    """(name, path, headers, raw body) carrying ``escape`` (at ``@``) in one text of each
    binding."""
    v1 = {"A2A-Version": "1.0"}
    cases = [
        ("v2 task", "/v2/tasks", {}, '{"task": "a@b"}'),
        ("v2 input", "/v2/tasks", {}, '{"task": "t", "input": {"k@": 1}}'),
        ("jsonrpc 1.0 text", "/a2a/jsonrpc", v1, jsonrpc("SendMessage", (
            '{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "@"}]}}'))),
        ("jsonrpc 1.0 metadata", "/a2a/jsonrpc", v1, jsonrpc("SendMessage", (
            '{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}],'
            ' "metadata": {"@": "v"}}}'))),
        ("jsonrpc 0.3", "/a2a/jsonrpc", {}, jsonrpc("message/send", (
            '{"message": {"kind": "message", "messageId": "m@", "role": "user",'
            ' "parts": [{"kind": "text", "text": "x"}]}}'))),
        ("http+json", "/message:send", v1,
         '{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "@"}]}}'),
    ]
    return [(name, path, headers, body.replace("@", escape).encode())
            for name, path, headers, body in cases]


async def post(inst: Instance, path: str, headers: dict[str, str], body: bytes,
               content_type: str = "application/json") -> tuple[int, Any]:
    hdrs = {**inst.headers(), "Content-Type": content_type, **headers}
    async with inst.session.post(inst.url + path, data=body, headers=hdrs) as resp:
        return resp.status, await resp.json(content_type=None)


@pytest.mark.parametrize("escape", LONE)
async def test_a_lone_surrogate_is_refused_on_every_binding(swarm: Swarm, escape: str) -> None:
    home = await swarm.start("home", skills=[ECHO])
    for name, path, headers, body in bodies(escape):
        status, answer = await post(home, path, headers, body)
        if path == "/a2a/jsonrpc":
            assert answer["error"]["code"] == -32602, (name, answer)
        else:
            assert status == 400, (name, status, answer)
            error = answer["error"]
            assert error.get("code") in ("invalid_params", 400), (name, answer)
    async with home.session.get(home.url + "/v2/tasks", headers=home.headers()) as resp:
        assert resp.status == 200 and (await resp.json())["tasks"] == []  # nothing stored
    status, answer = await post(home, "/v2/tasks", {}, b'{"task": "\\ud83d\\ude00"}')
    assert status == 200 and answer["result"]["parts"][0]["text"] == "\U0001f600"  # a pair


@pytest.mark.parametrize(("body", "content_type"), [
    ("{\"task\": \"h\u00e9\"}".encode("utf-16"), "application/json"),
    (b"\xef\xbb\xbf{\"task\": \"x\"}", "application/json"),  # a UTF-8 byte order mark
    (b"{\"task\": \"\xff\xfe\"}", "application/json"),
    ("{\"task\": \"h\u00e9\"}".encode("latin-1"), "application/json; charset=latin-1"),
    (b"{\"task\": \"x\x00\"}", "application/json"),  # a raw control character
])
async def test_odd_encodings_get_a_clear_400(swarm: Swarm, http: aiohttp.ClientSession,
                                             body: bytes, content_type: str) -> None:
    home = await swarm.start("home", skills=[ECHO])
    status, answer = await post(home, "/v2/tasks", {}, body, content_type)
    assert status == 400 and answer["error"]["code"] in ("malformed_json", "invalid_request",
                                                         "invalid_params"), answer
    async with http.get(home.url + "/healthz") as resp:
        assert resp.status == 200


async def test_undecodable_bytes_in_a_path_or_query_are_not_a_500(swarm: Swarm) -> None:
    home = await swarm.start("home", skills=[ECHO])
    v1 = {**home.headers(), "A2A-Version": "1.0"}
    for path in ("/v2/tasks/%ED%A0%80", "/v2/tasks?context_id=%ED%A0%80",
                 "/tasks/%ED%A0%80", "/tasks?contextId=%ED%A0%80", "/tasks/%FF%FE"):
        async with home.session.get(home.url + path, headers=v1) as resp:
            assert resp.status < 500, (path, resp.status)  # a 404, a 400, or nothing found
            assert isinstance(await resp.json(content_type=None), dict)
