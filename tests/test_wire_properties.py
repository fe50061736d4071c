"""Property tests for the wire's framing: JSON bodies (exact numbers, bounded nesting,
any bytes in) and server-sent events (what the server frames, the client reads back)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from internal.protocol.a2a.client import V2Transport
from internal.protocol.a2a.codec import butler_v2, exact_json
from internal.protocol.a2a.model import (
    Artifact,
    Part,
    RequestError,
    Task,
    TaskEvent,
    TaskRequest,
    TaskState,
)
from internal.protocol.a2a.server import event_frame

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.decimals(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=25)


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_parse_or_fail_as_a_request_error(raw: bytes) -> None:
    try:
        exact_json.loads(raw, max_depth=8)
    except RequestError as err:
        assert err.code in ("malformed_json", "invalid_request")


@given(json_values)
def test_json_round_trips_exactly(value: Any) -> None:
    assert exact_json.loads(exact_json.dumps_bytes(value), max_depth=64) == plain(value)


@given(json_values, st.booleans())
def test_orjson_reads_and_writes_what_the_standard_library_does(value: Any,
                                                                 ascii_only: bool) -> None:
    """orjson does the work; ``json`` is the reference it must match:
    fractions as exact Decimals, integers of any size, the same bytes out."""
    reference = json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))
    assert exact_json.dumps(value) == reference
    text = json.dumps(value, default=float, ensure_ascii=ascii_only, indent=1)
    assert exact_json.loads(text, max_depth=64) == json.loads(text, parse_float=Decimal)


def test_huge_integers_take_the_standard_path_and_lone_surrogates_are_refused() -> None:
    assert exact_json.loads('["\\ud83d\\ude00", 123456789012345678901234567890, -1.50]') == [
        "\U0001f600", 123456789012345678901234567890, Decimal("-1.50")]
    with pytest.raises(RequestError) as refused:
        exact_json.loads('["\\ud800", 123456789012345678901234567890]')
    assert refused.value.code == "invalid_params"
    assert exact_json.dumps({"s": "\ud800", "n": 2**70}) == '{"s":"\ud800","n":' + str(2**70) + '}'


@given(st.integers(0, 3000), st.sampled_from(["[", '{"a":']), st.booleans())
def test_nesting_is_refused_before_parsing(depth: int, opener: str, closed: bool) -> None:
    closer = "]" if opener == "[" else "}"
    balanced = closed or depth == 0
    raw = opener * depth + "1" + (closer * depth if closed else "")
    try:
        exact_json.loads(raw, max_depth=32)
    except RequestError as err:
        assert (err.code, balanced) in ({("invalid_request", balanced)} if depth > 32
                                        else {("malformed_json", False)}), (depth, err)
    else:
        assert balanced and depth <= 32


def plain(value: Any) -> Any:
    """What a value reads back as: Decimals go out as strings (exact amounts)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40) | st.sampled_from(
    ["", "line\nbreak", "cr\rlf\r\n", "data: x\n\nevent: y", "\u2028\u0085", ":comment"])
ids = st.from_regex(r"[a-z0-9][a-z0-9.-]{0,12}", fullmatch=True)
events = st.builds(
    lambda task_id, state, message, parts, artifact: TaskEvent(
        Task(id=task_id, context_id="c", owner="", state=state, request=TaskRequest(),
             created_at="2026-01-01T00:00:00Z", updated_at="2026-01-01T00:00:00Z",
             parts=tuple(Part(text=p) for p in parts), status_message=message),
        "artifact" if artifact is not None else "status",
        Artifact("a1", (Part(text=artifact),), name=artifact) if artifact is not None else None),
    ids, st.sampled_from(TaskState), text, st.lists(text, max_size=3), st.none() | text)
FRAMES = web.AppKey("frames", list)


@pytest.fixture
async def peer(http: aiohttp.ClientSession) -> AsyncIterator[V2Transport]:
    """A server that streams whatever frames the test put in ``app[FRAMES]``."""

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for frame in request.app[FRAMES]:
            for at in range(0, len(frame), 16384):  # as a busy server's writes arrive
                await response.write(frame[at:at + 16384])
        await response.write_eof()
        return response

    app = web.Application()
    app[FRAMES] = []
    app.router.add_get("/v2/tasks/{id}/events", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = V2Transport(f"http://127.0.0.1:{port}", "t", session=http, timeout=10)
    client.frames = app[FRAMES]  # type: ignore[attr-defined]
    yield client
    await runner.cleanup()


def expected(event: TaskEvent) -> tuple[str, Any]:
    if event.kind == "artifact" and event.artifact is not None:
        return "artifact", {"task_id": event.task.id,
                            "artifact": butler_v2.encode_artifact(event.artifact)}
    return "status", butler_v2.encode_task(event.task)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(events, min_size=1, max_size=5), st.sampled_from([b"", b": keepalive\n\n"]))
async def test_server_sent_events_round_trip(peer: V2Transport, sent: list[TaskEvent],
                                             comment: bytes) -> None:
    frames: list[bytes] = peer.frames  # type: ignore[attr-defined]
    frames[:] = [comment + event_frame(e) for e in sent]
    got = [item async for item in peer.events("t")]
    assert got == [expected(e) for e in sent]


async def test_a_large_event_reaches_the_client(peer: V2Transport) -> None:
    event = TaskEvent(Task(id="t", context_id="c", owner="", state=TaskState.COMPLETED,
                           request=TaskRequest(), created_at="", updated_at="",
                           parts=(Part(text="x" * 300_000),)), "status")
    peer.frames[:] = [event_frame(event)]  # type: ignore[attr-defined]
    got = [item async for item in peer.events("t")]
    assert got == [expected(event)]


def test_exact_decimals_survive_a_frame() -> None:
    data = exact_json.loads(event_frame(TaskEvent(Task(
        id="t", context_id="c", owner="", state=TaskState.COMPLETED, request=TaskRequest(),
        created_at="", updated_at="", parts=(Part(data={"usd": Decimal("0.1")}),)),
        "status")).split(b"data: ", 1)[1])
    assert data["result"]["parts"][0]["data"]["usd"] == "0.1"


def test_a_stored_row_gives_the_task_back_and_the_answer_is_its_encoding() -> None:
    from dataclasses import replace

    from butler.engine.task_document import task_from_row, task_row

    def decode_row(task_id: str, owner: str, context_id: str, state: str, _: int,
                   document: str) -> Task:
        return task_from_row(task_id, owner, context_id, state, document)

    def row_columns(task: Task) -> tuple[str, str, str, str, int, str]:
        return task_row(task)

    task = Task(id="t-1", context_id="c-1", owner="operator", state=TaskState.WORKING,
                request=TaskRequest(text="hi", capabilities_needed=("x.y",)),
                created_at="2026-11-22T00:00:00.000000Z",
                updated_at="2026-11-22T00:00:00.000000Z")
    answer = butler_v2.task_json(task)
    assert json.loads(answer) == json.loads(exact_json.dumps(butler_v2.encode_task(task)))
    assert decode_row(*row_columns(task)) == task

    done = replace(task, state=TaskState.COMPLETED, parts=(Part(text="hi"),))
    assert json.loads(butler_v2.task_json(done))["state"] == "completed"
    assert decode_row(*row_columns(done)) == done
