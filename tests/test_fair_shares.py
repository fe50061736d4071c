"""No caller can take a shared pool from the others (issue 36): each flood below comes from
one caller (or from clients without a token), is bounded in count, and runs against a real
daemon with small pools; meanwhile another caller's requests all succeed, and afterwards
the process's descriptors are back where they were."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web

from butler.http_app import A2A_FRONT
from butler.memory import MemoryStore
from butler.push.store import SqlitePushStore
from internal.http import LoadLimits
from internal.protocol.a2a.model import Identity, PushConfig
from internal.shares import FairPool, PoolFull, Share
from tests.a2a_support import WAIT, plain_message, rpc, send_request, text, user_message
from tests.support import (
    ECHO,
    Instance,
    ServeProcess,
    Swarm,
    config_dict,
    gated_skill,
    left_for_the_collector,
    post_task,
    wait_until,
    write_config,
)

CALLERS: dict[str, dict[str, Any]] = {"flood": {}, "other": {}}
SMALL = {"server": {"max_inflight": 8, "max_streams": 8},
         "shares": {"running_tasks": {"total": 8}, "mcp_sessions": {"total": 8}}}
OPENING = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "1"}}}
ADMIN = Identity("test", "admin")
ACCEPT = {"Accept": "application/json, text/event-stream"}


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def fds_back_to(baseline: int) -> None:
    await wait_until(lambda: open_fds() <= baseline + 2,
                     what=f"descriptors back to {baseline} (now {open_fds()})")


@pytest.fixture
async def daemon(swarm: Swarm) -> AsyncIterator[Instance]:
    yield await swarm.start("home", skills=[ECHO, WAIT], callers=CALLERS, extra=SMALL)


async def others_all_succeed(inst: Instance, count: int = 10) -> None:
    for _ in range(count):
        status, task = await post_task(inst, {"task": "hi", "skill": "echo"}, who="other")
        assert status == 200 and task["state"] == "completed"


async def cancel_all(inst: Instance) -> None:
    engine = inst.daemon.engine
    page = await engine.list_tasks(ADMIN, state=None, context_id=None, cursor=None, limit=100)
    for task in page.tasks:
        if not task.state.terminal:
            await engine.cancel(ADMIN, task.id)


def test_the_share_rule() -> None:
    share = Share(128)
    assert (share.caller_limit, share.anonymous_limit) == (96, 16)
    assert Share(1).caller_limit == 1 and Share(4).caller_limit == 3
    pool = FairPool("things", Share(4))
    held = [pool.take("a") for _ in range(3)]
    with pytest.raises(PoolFull) as mine:
        pool.take("a")
    assert mine.value.mine and "its share is 3 of 4" in mine.value.message
    last = pool.take("b")
    with pytest.raises(PoolFull) as full:
        pool.take("c")
    assert not full.value.mine
    for place in [*held, last, last]:  # a second release gives nothing back twice
        place.release()
    assert pool.in_use == 0 and pool.held_by("a") == 0


async def test_blocking_requests_of_one_caller_leave_room_for_another(daemon: Instance) -> None:
    # Counted once the other caller has been served: its kept-alive connection and the
    # task store's files open are the baseline, not something the flood left.
    await others_all_succeed(daemon, count=1)
    baseline = open_fds()
    flood_count = 12
    async with aiohttp.ClientSession() as flood:
        async def hold() -> int:
            async with flood.post(f"{daemon.url}/v2/tasks", headers=daemon.headers("flood"),
                                  json={"task": "x", "skill": "wait"}) as resp:
                return resp.status

        holders = [asyncio.create_task(hold()) for _ in range(flood_count)]
        pool = daemon.daemon.app[A2A_FRONT].load_limits
        # 6 of the 8 places are the flooding caller's share; the rest are refused at once.
        await wait_until(lambda: sum(h.done() for h in holders) == flood_count - 6
                         and pool.inflight == 6, what="the flood holding its share")
        refused = [h.result() for h in holders if h.done()]
        assert refused == [429] * (flood_count - 6)
        await others_all_succeed(daemon)
        await cancel_all(daemon)
        await asyncio.gather(*holders)
    await wait_until(lambda: pool.inflight == 0, what="every place given back")
    await fds_back_to(baseline)


async def test_blocking_grpc_calls_of_one_caller_leave_room_for_another(swarm: Swarm) -> None:
    """The same flood over gRPC (130 blocking calls once filled the pool): past its share
    the caller is refused ``RESOURCE_EXHAUSTED``, and the other caller is served on both
    ports meanwhile."""
    pytest.importorskip("grpc")
    import grpc
    from a2a.types import TaskState

    from tests.grpc_support import channel, service_stub
    from tests.test_a2a_grpc import GRPC, error_info
    from tests.test_a2a_grpc_admission import V1

    inst = await swarm.start("home", skills=[ECHO, WAIT], callers=CALLERS,
                             configurations=GRPC, extra=SMALL)
    assert inst.daemon.grpc_url is not None
    pool = inst.daemon.app[A2A_FRONT].load_limits
    request = send_request(user_message(text("x"), metadata={"skill": "wait"}))
    async with channel(inst.daemon.grpc_url, inst.tokens["flood"]) as flood, \
            channel(inst.daemon.grpc_url, inst.tokens["other"]) as other:
        began = asyncio.get_running_loop().time()
        holders = [asyncio.ensure_future(service_stub(flood).SendMessage(request, metadata=V1))
                   for _ in range(12)]
        await wait_until(lambda: sum(h.done() for h in holders) == 6 and pool.inflight == 6,
                         what="the flood holding its share of 6")
        # Each refusal ended after at least half the hold (server.refusal_hold_seconds, 1 s:
        # a random part of it, from half to all).
        assert asyncio.get_running_loop().time() - began >= 0.45
        refused = [h.exception() for h in holders if h.done()]
        assert all(isinstance(err, grpc.aio.AioRpcError)
                   and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                   and error_info(err).metadata["code"] == "rate_limited" for err in refused)
        echo = send_request(user_message(text("hi"), metadata={"skill": "echo"}))
        for _ in range(5):
            answer = await service_stub(other).SendMessage(echo, metadata=V1)
            assert answer.task.status.state == TaskState.TASK_STATE_COMPLETED
        await others_all_succeed(inst, 5)
        await cancel_all(inst)
        await asyncio.gather(*holders, return_exceptions=True)
    await wait_until(lambda: pool.inflight == 0, what="every place given back")


async def test_a_refusal_is_freed_once_answered(daemon: Instance) -> None:
    """A refused request leaves nothing for the cycle collector: held in a reference
    cycle (the exception, its traceback, the frame that raised it), each refusal kept its
    request alive until the next collection, and a flood of them made every collection a
    long stop of the loop for every caller."""
    async with aiohttp.ClientSession() as flood:
        async def post() -> int:
            async with flood.post(f"{daemon.url}/v2/tasks", headers=daemon.headers("flood"),
                                  json={"task": "x", "skill": "wait"}) as resp:
                return resp.status

        holders = [asyncio.create_task(post()) for _ in range(6)]  # the flood's whole share
        pool = daemon.daemon.app[A2A_FRONT].load_limits
        await wait_until(lambda: pool.inflight == 6, what="the flood holding its share")
        with left_for_the_collector() as left:  # held together: one hold, not twenty
            assert await asyncio.gather(*(post() for _ in range(20))) == [429] * 20
        await cancel_all(daemon)
        await asyncio.gather(*holders)
    kept = [o for o in left if isinstance(o, (PoolFull, web.BaseRequest))]
    assert kept == []


async def test_a_refusal_is_held_for_its_retry_after_while_others_are_served(
        swarm: Swarm) -> None:
    """A caller past its share that asks again at once (ignoring ``Retry-After``) is
    answered no sooner than the hold (gRPC too: the test above): it sends one refused
    request per hold on each connection instead of as many as it can, and its refusals no
    longer take the loop from the other callers, who are served meanwhile."""
    hold = 0.5
    held = {**SMALL, "server": {"max_inflight": 8, "max_streams": 8,
                                "refusal_hold_seconds": hold}}
    inst = await swarm.start("home", skills=[ECHO, WAIT], callers=CALLERS, extra=held)
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as flood:
        async def post() -> tuple[int, float, str]:
            began = loop.time()
            async with flood.post(f"{inst.url}/v2/tasks", headers=inst.headers("flood"),
                                  json={"task": "x", "skill": "wait"}) as resp:
                return resp.status, loop.time() - began, resp.headers.get("Retry-After", "")

        holders = [asyncio.create_task(post()) for _ in range(6)]  # the flood's share
        pool = inst.daemon.app[A2A_FRONT].load_limits
        await wait_until(lambda: pool.inflight == 6, what="the flood holding its share")
        refused = [asyncio.create_task(post()) for _ in range(4)]
        await others_all_succeed(inst, count=3)  # while the refusals are held
        answers = await asyncio.gather(*refused)
        assert [status for status, _, _ in answers] == [429] * 4
        assert all(took >= hold * 0.9 and retry == "1" for _, took, retry in answers)
        assert pool.inflight == 6  # a held refusal holds no place
        await cancel_all(inst)
        await asyncio.gather(*holders)


def test_a_refused_place_leaves_no_cycle() -> None:
    pool = FairPool("things", Share(1))
    pool.take("a")
    with left_for_the_collector() as left:
        for _ in range(10):
            with contextlib.suppress(PoolFull):
                pool.take("a")
    assert left == []


async def test_running_tasks_are_counted_exactly(daemon: Instance) -> None:
    """Concurrent submits once overshot the per-caller cap (261 running against 256)."""
    async def submit(who: str) -> int:
        status, _ = await post_task(daemon, {"task": "x", "skill": "wait", "mode": "async"},
                                    who=who)
        return status

    statuses = await asyncio.gather(*(submit("flood") for _ in range(20)))
    accepted = [s for s in statuses if s < 300]
    assert len(accepted) == 6 and statuses.count(429) == 14
    assert await submit("other") < 300  # the quarter left for everyone else
    await others_all_succeed(daemon, 1)
    await cancel_all(daemon)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="pidfds are Linux's")
async def test_running_commands_take_no_thread_each(tmp_path: Path) -> None:
    """``butler serve`` learns that a command ended from its event loop: a caller's running
    command tasks add no thread each (Python 3.11's default started one per child, and
    their stacks and malloc arenas stayed in the daemon after the children ended)."""
    gate = tmp_path / "gate"
    cfg, tokens = config_dict(tmp_path, "home", skills=[gated_skill("held", gate)])
    server = await ServeProcess.start(write_config(tmp_path, "home", cfg),
                                      tmp_path / "serve.log")
    pid = server.proc.pid

    def threads() -> int:
        return len(os.listdir(f"/proc/{pid}/task"))

    def children() -> int:
        return len(Path(f"/proc/{pid}/task/{pid}/children").read_text().split())

    try:
        before = threads()
        auth = {"Authorization": f"Bearer {tokens['operator']}"}
        async with aiohttp.ClientSession() as http:
            ids = []
            for _ in range(8):
                async with http.post(f"{server.url}/v2/tasks", headers=auth, json={
                        "task": "x", "skill": "held", "mode": "async"}) as resp:
                    assert resp.status == 202
                    ids.append((await resp.json())["id"])
            await wait_until(lambda: children() == 8, what="8 commands running")
            assert threads() == before
            gate.touch()

            async def all_completed() -> bool:
                states = []
                for task_id in ids:
                    async with http.get(f"{server.url}/v2/tasks/{task_id}",
                                        headers=auth) as resp:
                        states.append((await resp.json())["state"])
                return states == ["completed"] * 8

            await wait_until(all_completed, what="the 8 tasks completed")
        assert children() == 0 and threads() == before
    finally:
        await server.stop()


async def test_mcp_sessions_of_one_token_leave_room_for_another(daemon: Instance) -> None:
    pytest.importorskip("mcp")
    sessions = []

    async def initialize(who: str) -> tuple[int, Any]:
        async with daemon.session.post(f"{daemon.url}/mcp", json=OPENING,
                                       headers={**ACCEPT, **daemon.headers(who)}) as resp:
            await resp.read()
            return resp.status, resp.headers.get("Mcp-Session-Id")

    for _ in range(6):
        status, session_id = await initialize("flood")
        assert status == 200
        sessions.append(session_id)
    status, _ = await initialize("flood")
    assert status == 429
    status, theirs = await initialize("other")
    assert status == 200 and theirs
    ending = {**ACCEPT, **daemon.headers("flood"), "Mcp-Session-Id": sessions[0],
              "Mcp-Protocol-Version": "2025-06-18"}
    async with daemon.session.delete(f"{daemon.url}/mcp", headers=ending) as resp:
        assert resp.status == 200
    status, _ = await initialize("flood")  # an ended session gave its place back
    assert status == 200


async def test_clients_without_a_token_share_one_small_part(swarm: Swarm) -> None:
    inst = await swarm.start("home", skills=[ECHO, WAIT], callers={"other": {}},
                             configurations={"a2a": {"anonymous": {"enabled": True}}},
                             extra=SMALL)

    async def anonymous() -> int:
        async with inst.session.post(f"{inst.url}/v2/tasks",
                                     json={"task": "x", "skill": "wait"}) as resp:
            return resp.status

    holders = [asyncio.create_task(anonymous()) for _ in range(4)]
    pool = inst.daemon.app[A2A_FRONT].load_limits
    await wait_until(lambda: sum(h.done() for h in holders) == 3 and pool.inflight == 1,
                     what="anonymous clients holding their one place")
    assert [h.result() for h in holders if h.done()] == [429] * 3
    await others_all_succeed(inst)
    await cancel_all(inst)
    await asyncio.gather(*holders)


async def test_memory_entries_are_shared_out_by_writer(tmp_path: Path) -> None:
    store = await MemoryStore.open(tmp_path / "memory.db", Share(4))
    try:
        async def write_all(source: str, *texts: str) -> None:
            await asyncio.gather(*(store.write(t, source=source) for t in texts))

        with pytest.raises(PoolFull, match="its share is 3 of 4"):
            await write_all("flood", "a", "b", "c", "d", "e")  # at once: counted exactly
        assert await store.count() == 3
        await store.write("mine", key="k", source="other")
        with pytest.raises(PoolFull, match="all 4 memories"):
            await store.write("late", source="third")
        await store.write("replaced", key="k", source="other")  # not one more
    finally:
        await store.close()


async def test_push_configs_are_shared_out_by_caller(tmp_path: Path) -> None:
    store = SqlitePushStore(tmp_path / "push.db")
    await store.open()
    try:
        def config(task: str, n: int) -> PushConfig:
            return PushConfig(id=f"c{n}", task_id=task, url="https://hook.example/")

        share = Share(4)
        for n in range(3):
            await store.put(config("t1", n), "flood", share)
        with pytest.raises(PoolFull, match="its share is 3 of 4"):
            await store.put(config("t2", 9), "flood", share)
        await store.put(config("t1", 0), "flood", share)  # a replaced config is not one more
        await store.put(config("t3", 0), "other", share)
        assert len(await store.all_configs()) == 4
    finally:
        await store.close()



async def test_half_open_grpc_streams_are_refused_or_cut_off(swarm: Swarm) -> None:
    """Calls that open a stream and never send their request message (20,000 of them once
    added 393 MB, kept after they closed): without a token refused before the message is
    awaited; with one, each holds a place of its caller's share until the message
    deadline ends it; the other caller is served meanwhile, and every connection and
    descriptor is given back."""
    pytest.importorskip("grpc")
    import grpc
    from a2a.types import TaskState

    from tests.grpc_support import channel, service_stub
    from tests.test_a2a_grpc import GRPC
    from tests.test_a2a_grpc_admission import V1

    quick = {**SMALL, "server": {"max_inflight": 8, "body_timeout_seconds": 0.5,
                                 "header_timeout_seconds": 0.5}}
    inst = await swarm.start("home", skills=[ECHO], callers=CALLERS, configurations=GRPC,
                             extra=quick)
    target = inst.daemon.grpc_url
    assert target is not None
    pool = inst.daemon.app[A2A_FRONT].load_limits
    baseline = open_fds()
    never = asyncio.Event()

    async def no_message() -> AsyncIterator[bytes]:
        await never.wait()
        yield b""  # not reached

    def half_open(token: str | None, count: int) -> tuple[grpc.aio.Channel, list[Any]]:
        metadata = [*V1, *([("authorization", f"Bearer {token}")] if token else [])]
        # A connection of its own (channels to one target otherwise share one).
        chan = grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        method = chan.stream_unary("/lf.a2a.v1.A2AService/GetTask",
                                   request_serializer=bytes, response_deserializer=bytes)
        return chan, [method(no_message(), metadata=metadata) for _ in range(count)]

    async def codes(calls: list[Any]) -> list[grpc.StatusCode]:
        ended = []
        for call in calls:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            ended.append(caught.value.code())
        return ended

    anonymous, strangers = half_open(None, 20)
    assert set(await codes(strangers)) == {grpc.StatusCode.UNAUTHENTICATED}
    flooding, flood = half_open(inst.tokens["flood"], 10)
    await wait_until(lambda: pool.inflight == 6, what="the flood holding its share of 6")
    async with channel(target, inst.tokens["other"]) as other:
        echo = send_request(user_message(text("hi"), metadata={"skill": "echo"}))
        for _ in range(3):
            answer = await service_stub(other).SendMessage(echo, metadata=V1)
            assert answer.task.status.state == TaskState.TASK_STATE_COMPLETED
    ended = await codes(flood)
    assert sorted(ended, key=str) == sorted(
        [grpc.StatusCode.DEADLINE_EXCEEDED] * 6 + [grpc.StatusCode.RESOURCE_EXHAUSTED] * 4,
        key=str)
    assert pool.inflight == 0
    for chan in (anonymous, flooding):
        await chan.close()
    await fds_back_to(baseline)


async def test_a_refused_grpc_call_is_freed_once_answered(swarm: Swarm) -> None:
    """The same over gRPC: a refused call (here its token) leaves nothing for the cycle
    collector."""
    pytest.importorskip("grpc")
    import grpc

    from tests.grpc_support import channel
    from tests.test_a2a_grpc import GRPC
    from tests.test_a2a_grpc_admission import grpc_card

    inst = await swarm.start("home", configurations=GRPC)
    assert inst.daemon.grpc_url is not None
    async with channel(inst.daemon.grpc_url, "wrong") as chan:
        with pytest.raises(grpc.aio.AioRpcError):
            await grpc_card(inst, chan)  # gRPC's own first-call allocations
        with left_for_the_collector() as left:
            for _ in range(10):
                with pytest.raises(grpc.aio.AioRpcError):
                    await grpc_card(inst, chan)
    kept = [o for o in left if isinstance(o, BaseException)]
    assert kept == []


async def test_a_refusal_inside_a_json_rpc_call_is_held_too(swarm: Swarm) -> None:
    """Past its share of the running tasks (refused inside the call, not by the gate), a
    JSON-RPC caller is answered after the hold as on ``/v2`` and gRPC, not at once."""
    hold = 0.5
    held = {**SMALL, "server": {"max_inflight": 8, "max_streams": 8,
                                "refusal_hold_seconds": hold}}
    inst = await swarm.start("home", skills=[ECHO, WAIT], callers=CALLERS, extra=held)
    while (await post_task(inst, {"task": "x", "skill": "wait", "mode": "async"},
                           who="flood"))[0] < 300:
        pass  # until the flood's share of the running tasks is full
    loop = asyncio.get_running_loop()
    began = loop.time()
    status, body = await rpc(inst, "SendMessage", {
        "message": plain_message("x", metadata={"skill": "wait"}),
        "configuration": {"returnImmediately": True}}, who="flood")
    took = loop.time() - began
    assert status == 200 and "error" in body, body
    assert took >= hold * 0.9
    await cancel_all(inst)


async def test_grpc_holds_refused_calls_within_an_address_share_of_them() -> None:
    """A gRPC connection carries many calls: the held ones are a pool of their own, one
    address at most its share (past it a refusal ends its call at once), and a call its
    client cancels gives its place back."""
    pytest.importorskip("grpc")
    from internal.protocol.a2a.server.grpc_binding import GrpcBinding

    class Context:  # what the hold reads of a call
        def peer(self) -> str:
            return "ipv4:127.0.0.1:5000"

    binding = GrpcBinding(cast(Any, None), cast(Any, None), LoadLimits(None),
                          refusal_hold=3600, held_refusals=2)  # one address: 1 of 2
    context = cast(Any, Context())
    calls = [asyncio.create_task(binding._held(context, 3600)) for _ in range(3)]
    await wait_until(lambda: sum(c.done() for c in calls) == 2, what="two answered at once")
    assert binding.held.in_use == 1
    (held,) = [c for c in calls if not c.done()]
    held.cancel()
    await asyncio.gather(held, return_exceptions=True)
    assert binding.held.in_use == 0

