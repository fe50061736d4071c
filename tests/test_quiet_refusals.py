"""Refusals are fast and quiet (issue 36): a malformed gRPC message is INVALID_ARGUMENT
without a traceback, and a flood of refusals of one reason is one log line per interval
plus a count, not one line each."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.support import ECHO, Swarm, post_task

FLOOD = 40


async def test_a_refusal_flood_is_one_line_and_a_count(swarm: Swarm,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    home = await swarm.start("home", skills=[ECHO])
    for _ in range(FLOOD):  # a bound caller that is not the chain's last hop
        status, body = await post_task(home, {"task": "x", "skill": "echo",
                                              "caller_chain": ["elsewhere"]})
        assert status == 403 and body["error"]["code"] == "chain_mismatch"
    refused = [r for r in caplog.records if r.getMessage() == "task refused"]
    assert len(refused) == 1
    assert home.daemon.incidents.totals["butler.tasks: task refused (chain_mismatch)"] == FLOOD
    await swarm.stop(home)  # the summary goes out at the latest when the daemon stops
    summaries = [r.getMessage() for r in caplog.records if "more in the last" in r.getMessage()]
    assert summaries == [f"butler.tasks: task refused (chain_mismatch): {FLOOD - 1} more in "
                         "the last 60s (logged once per interval)"]


async def test_a_malformed_grpc_message_is_invalid_argument_without_a_traceback(
        swarm: Swarm, caplog: pytest.LogCaptureFixture) -> None:
    grpc = pytest.importorskip("grpc")
    from tests.grpc_support import channel
    from tests.test_a2a_grpc import GRPC

    home = await swarm.start("home", skills=[ECHO], configurations=GRPC)
    assert home.daemon.grpc_url is not None
    async with channel(home.daemon.grpc_url, home.tokens["operator"]) as chan:
        send: Any = chan.unary_unary("/lf.a2a.v1.A2AService/SendMessage")
        for garbage in (b"\xff\xff\xff\xff", b"\x0a\x05abc", b"\x12" + b"\x80" * 11):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await send(garbage, metadata=[("a2a-version", "1.0")])
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, garbage
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
