"""The swarm envelope on the standard A2A bindings: message metadata and headers, the
same refusals as on /v2, and clients that know nothing of it starting a new chain."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict

from tests.a2a_support import (
    error_reason,
    plain_message,
    rpc,
    sdk_client,
    send_request,
    send_task,
    text,
    user_message,
)
from tests.support import Instance, Swarm

URI = "urn:butler:a2a:ext:swarm:v1"


def swarm_meta(**fields: Any) -> dict[str, Any]:
    return {URI: fields}


async def send(inst: Instance, meta: dict[str, Any] | None = None, *, who: str = "operator",
               headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    message = plain_message("hi", **({"metadata": meta} if meta else {}))
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    hdrs = {**inst.headers(who), "A2A-Version": "1.0", **(headers or {})}
    async with inst.session.post(inst.url + "/a2a/jsonrpc", json=body, headers=hdrs) as resp:
        return resp.status, resp.headers, await resp.json()


@pytest.fixture
async def home(swarm: Swarm) -> Instance:
    return await swarm.start(
        "home", callers={"operator": {"bound": False}, "office": {}},
        skills=[{"id": "echo", "builtin": "echo", "capabilities": ["echo"], "expose": True,
                 "cost_usd": "0.50"}],
        swarm={"max_depth": 2, "budget_usd": "5.00"})


async def test_a_plain_client_starts_a_new_chain(home: Instance) -> None:
    async with sdk_client(home) as client:
        task = await send_task(client, send_request(user_message(text("hi"))))
    meta = MessageToDict(task.metadata)[URI]
    assert list(meta["callerChain"]) == [] and meta["depth"] == 0
    assert len(meta["traceId"]) == 32
    assert dict(meta["budget"])["startUsd"] == "5.00"
    assert dict(meta["budget"])["spentUsd"] == "0.50"


def all_keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in all_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in all_keys(v)}
    return set()


async def test_the_swarm_metadata_is_lower_camel_case_throughout(home: Instance) -> None:
    _, _, body = await send(home)
    meta = body["result"]["task"]["metadata"][URI]
    assert meta["cost"] == {"agent": "home", "skill": "echo", "costUsd": "0.50",
                            "totalUsd": "0.50", "durationMs": meta["cost"]["durationMs"],
                            "status": "completed", "children": []}
    assert not [k for k in all_keys(meta) if "_" in k]


async def test_envelope_in_metadata(home: Instance) -> None:
    status, headers, body = await send(
        home, swarm_meta(callerChain=["origin"], depth=1, budgetUsd="2.00",
                         traceId="ab" * 16), headers={"A2A-Extensions": URI})
    assert status == 200 and headers["A2A-Extensions"] == URI
    meta = body["result"]["task"]["metadata"][URI]
    assert meta["callerChain"] == ["origin"] and meta["traceId"] == "ab" * 16
    assert meta["budget"]["startUsd"] == "2.00"


async def test_envelope_in_headers(home: Instance) -> None:
    _, _, body = await send(home, headers={"X-Swarm-Agent-Chain": "a,b", "X-Swarm-Depth": "2"})
    assert body["result"]["task"]["metadata"][URI]["callerChain"] == ["a", "b"]


@pytest.mark.parametrize(("meta", "headers", "code", "reason"), [
    (swarm_meta(callerChain=["x", "home"]), {}, -31409, "LOOP_DETECTED"),
    (swarm_meta(callerChain=["a", "b", "c"]), {}, -31422, "DEPTH_EXCEEDED"),
    (swarm_meta(budgetUsd="0.10"), {}, -31402, "BUDGET_EXHAUSTED"),
    (None, {"X-Swarm-Agent-Chain": "home"}, -31409, "LOOP_DETECTED"),
    (swarm_meta(callerChain=["a"]), {"X-Swarm-Agent-Chain": "b"}, -32602, "INVALID_ENVELOPE"),
    (swarm_meta(callerChain=["a"], depth=3), {}, -32602, "INVALID_ENVELOPE"),
    (swarm_meta(budgetUsd="lots"), {}, -32602, "INVALID_ENVELOPE"),
    ({URI: "not an object"}, {}, -32602, "INVALID_ENVELOPE"),
])
async def test_refusals_and_bad_envelopes(home: Instance, meta: dict[str, Any] | None,
                                          headers: dict[str, str], code: int,
                                          reason: str) -> None:
    status, _, body = await send(home, meta, headers=headers)
    assert status == 200 and body["error"]["code"] == code, body
    assert error_reason(body["error"]) == reason
    assert body["error"]["data"][0]["domain"] == "butler"


async def test_a_bound_token_cannot_forge_the_caller(home: Instance) -> None:
    _, _, body = await send(home, swarm_meta(callerChain=["mallory"]), who="office")
    assert body["error"]["code"] == -31403 and error_reason(body["error"]) == "CHAIN_MISMATCH"
    _, _, body = await send(home, who="office")
    assert body["result"]["task"]["metadata"][URI]["callerChain"] == ["office"]
    _, body = await rpc(home, "SendMessage", {"message": plain_message(), "metadata":
                                              swarm_meta(callerChain=["x", "home"])})
    assert body["error"]["code"] == -31409  # the request's metadata counts too
