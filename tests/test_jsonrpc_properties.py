"""Property tests for the A2A JSON-RPC endpoint: whatever is posted, the answer is a
JSON-RPC response (a result, or an error object with a code from ERROR_TABLE), never
a 5xx or an internal error; and the A2A 1.0 params decoders raise only ButlerError."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from internal.protocol.a2a.codec import a2a_v1
from internal.protocol.a2a.model import ERROR_TABLE, JSONRPC_PATH, VERSION_HEADER, ButlerError
from internal.protocol.a2a.server import V1Dialect
from tests.openapi_support import LiveProcess
from tests.support import ECHO, config_dict, write_config

RPC_CODES = {spec.rpc_code for spec in ERROR_TABLE.values()}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10) | st.floats(
        allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=12)
parts = st.lists(st.one_of(
    st.builds(lambda t: {"text": t}, st.text(max_size=20)),
    st.builds(lambda d: {"data": d}, st.dictionaries(st.text(max_size=5), json_values,
                                                     max_size=2)),
    st.dictionaries(st.sampled_from(["text", "raw", "url", "data", "mediaType"]), json_values,
                    max_size=2)), max_size=3)
message = st.fixed_dictionaries(
    {"messageId": st.text(max_size=12) | json_values,
     "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", 1, "user"]) | json_values,
     "parts": parts | json_values},
    optional={"contextId": st.text(max_size=8), "taskId": st.text(max_size=8),
              "metadata": json_values})
params = st.one_of(
    json_values,
    st.fixed_dictionaries({"message": message}, optional={
        "configuration": st.fixed_dictionaries({}, optional={
            "returnImmediately": st.booleans() | json_values,
            "historyLength": st.integers(-5, 5) | json_values}) | json_values,
        "metadata": json_values}),
    st.fixed_dictionaries({}, optional={"id": st.text(max_size=8) | json_values,
                                        "historyLength": json_values,
                                        "pageSize": json_values, "status": json_values,
                                        "pageToken": json_values}))
methods = st.sampled_from(sorted(V1Dialect.methods) + ["message/send", "tasks/get", ""]) \
    | st.text(max_size=12) | json_values
envelopes = st.fixed_dictionaries(
    {"method": methods, "params": params},
    optional={"jsonrpc": st.just("2.0") | json_values,
              "id": st.integers() | st.text(max_size=8) | json_values})


@given(params)
def test_send_params_decode_or_fail_as_butler_errors(raw: Any) -> None:
    with contextlib.suppress(ButlerError):
        a2a_v1.decode_send_params(raw)
    if isinstance(raw, dict):  # the binding checks that params is an object first
        with contextlib.suppress(ButlerError):
            a2a_v1.decode_list_query(raw)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp: Path = tmp_path_factory.mktemp("jsonrpc")
    cfg, tokens = config_dict(tmp, "home", skills=[ECHO], extra={
        "rate_limits": {"per_caller_per_second": 0, "per_address_per_second": 0}})
    server = LiveProcess(["serve", "-c", str(write_config(tmp, "home", cfg))],
                         tmp / "serve.log")
    try:
        yield server.url, tokens["operator"]
    finally:
        server.stop()


def check_response(data: Any, sent: dict[str, Any]) -> None:
    assert data["jsonrpc"] == "2.0" and ("result" in data) != ("error" in data), data
    if "error" in data:
        assert data["error"]["code"] in RPC_CODES, data
        assert data["error"]["message"] != "internal error", data
    raw_id = sent.get("id")
    if isinstance(raw_id, str | int) and not isinstance(raw_id, bool):
        assert data["id"] == raw_id


@settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(envelopes, st.sampled_from(["1.0", "0.3", "", "2.0", "x"]))
def test_any_request_gets_a_json_rpc_answer(daemon: tuple[str, str], body: dict[str, Any],
                                            version: str) -> None:
    url, token = daemon
    headers = {"Authorization": f"Bearer {token}", VERSION_HEADER: version}
    with requests.post(url + JSONRPC_PATH, data=json.dumps(body), headers=headers,
                       timeout=10) as resp:
        assert resp.status_code == 200, (resp.status_code, resp.text[:300])
        if resp.headers["Content-Type"].startswith("text/event-stream"):
            frames = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")]
            assert frames
            for frame in frames:
                check_response(json.loads(frame), body)
        else:
            check_response(resp.json(), body)
