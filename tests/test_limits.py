"""Server limits on a real daemon: body size, JSON depth, slow clients, connection and
in-flight caps. Every refusal is JSON; none is a 500."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import logging
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from internal.http import IncidentLog
from tests.raw_http import assert_json_error, close, connect, get_healthz, parse
from tests.support import ECHO, Swarm, gated_skill, wait_until


async def test_body_over_the_limit_is_413(swarm: Swarm, http: aiohttp.ClientSession) -> None:
    home = await swarm.start("home")  # default max_body_bytes: 1 MiB
    body = io.BytesIO(json.dumps({"task": "x" * (2 * 1024 * 1024)}).encode())
    async with http.post(f"{home.url}/v2/tasks", data=body, headers={
            **home.headers(), "Content-Type": "application/json"}) as resp:
        assert resp.status == 413
        assert_json_error(await resp.json(), "payload_too_large")
    async with http.post(f"{home.url}/v2/tasks", json={"task": "fits"},
                         headers=home.headers()) as resp:
        assert resp.status == 200


async def test_malformed_and_deep_json_are_400(swarm: Swarm, http: aiohttp.ClientSession) -> None:
    home = await swarm.start("home", extra={"server": {"max_json_depth": 5}})
    json_type = {**home.headers(), "Content-Type": "application/json"}
    deep: Any = 1
    for _ in range(6):
        deep = {"a": deep}
    for data, code in [
        (b"{not json", "malformed_json"),
        (b"", "malformed_json"),
        (b'{"task": NaN}', "malformed_json"),
        (b"\xff\xfe", "malformed_json"),
        (b"[1, 2]", "invalid_request"),
        (json.dumps({"task": "x", "input": deep}).encode(), "invalid_request"),
        (b"[" * 100_000, "invalid_request"),  # deeper than the limit, and than recursion
    ]:
        async with http.post(f"{home.url}/v2/tasks", data=data, headers=json_type) as resp:
            assert resp.status == 400, data[:30]
            assert_json_error(await resp.json(), code)
    shallow = {"task": "x", "input": {"a": {"b": {"c": 1}}}}
    async with http.post(f"{home.url}/v2/tasks", json=shallow, headers=home.headers()) as resp:
        assert resp.status == 200


async def test_routing_errors_are_json(swarm: Swarm, http: aiohttp.ClientSession) -> None:
    home = await swarm.start("home")
    for method, path, status, code in [
        ("GET", "/v2/nowhere", 404, "not_found"),
        ("DELETE", "/v2/card", 405, "method_not_allowed"),
        ("GET", "/v2/tasks/unknown-task", 404, "task_not_found"),
    ]:
        async with http.request(method, home.url + path, headers=home.headers()) as resp:
            assert resp.status == status
            assert_json_error(await resp.json(), code)
    async with http.post(f"{home.url}/v2/tasks", data=b"task=x", headers={
            **home.headers(), "Content-Type": "application/x-www-form-urlencoded"}) as resp:
        assert resp.status == 415
        assert_json_error(await resp.json(), "unsupported_media_type")


async def test_slow_headers_are_cut_off(swarm: Swarm) -> None:
    home = await swarm.start("home", extra={"server": {"header_timeout_seconds": 1}})
    reader, writer = await connect(home)
    head = (b"GET /v2/card HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
            + home.tokens["operator"].encode() + b"\r\n\r\n")
    sent = 0

    async def dribble() -> None:
        nonlocal sent
        for byte in head:
            writer.write(bytes([byte]))
            await writer.drain()
            sent += 1
            await asyncio.sleep(0.3)  # the slow client's pace

    sender = asyncio.create_task(dribble())
    try:
        async with asyncio.timeout(30):
            data = await reader.read()
        at_the_cut = sent
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        await close(writer)
    assert data == b"", "no request was ever complete, so no response"
    assert at_the_cut < len(head), "cut off at the header timeout, the head still incomplete"


async def test_a_stalled_body_gets_408_and_is_cut_off(swarm: Swarm) -> None:
    home = await swarm.start("home", extra={"server": {"body_timeout_seconds": 1}})
    reader, writer = await connect(home)
    writer.write(b"POST /v2/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000\r\nAuthorization: Bearer "
                 + home.tokens["operator"].encode() + b'\r\n\r\n{"task": "half of it')
    try:
        async with asyncio.timeout(30):
            data = await reader.read()  # the 408, then the server closes
    finally:
        await close(writer)
    status, headers, body = parse(data)
    assert status == 408
    assert headers["content-type"].startswith("application/json")
    assert_json_error(body, "request_timeout")


async def test_connection_cap_refuses_the_next_with_503(swarm: Swarm) -> None:
    home = await swarm.start("home", extra={"server": {"max_connections": 3,
                                                    "max_connections_per_address": 3}})
    held = [await connect(home) for _ in range(3)]
    try:
        for reader, writer in held:  # each one is open, served and kept alive
            assert await get_healthz(reader, writer) == 200
        reader, writer = await connect(home)
        async with asyncio.timeout(5):
            data = await reader.read()
        await close(writer)
        status, headers, body = parse(data)
        assert status == 503
        assert headers["retry-after"].isdigit()
        assert_json_error(body, "overloaded")
        for reader, writer in held:  # the others still work
            assert await get_healthz(reader, writer) == 200
    finally:
        for _, writer in held:
            await close(writer)
    # Once they are gone, there is room again.
    async with aiohttp.ClientSession() as http, http.get(f"{home.url}/healthz") as resp:
        assert resp.status == 200


async def test_connection_cap_holds_for_a_burst(swarm: Swarm) -> None:
    """Regression: the cap counted connections only once aiohttp registered them, so
    connections accepted in one batch all got past it."""
    home = await swarm.start("home", extra={"server": {"max_connections": 3,
                                                    "max_connections_per_address": 3}})
    held = [await connect(home) for _ in range(2)]
    for reader, writer in held:
        assert await get_healthz(reader, writer) == 200
    # Blocking connects: all three wait in the accept queue and are accepted together.
    burst = [socket.create_connection(("127.0.0.1", home.daemon.port)) for _ in range(3)]
    streams = [await asyncio.open_connection(sock=s) for s in burst]
    try:
        refused = 0
        for reader, writer in streams:
            try:
                async with asyncio.timeout(0.5):
                    first = await reader.read(12)
            except TimeoutError:
                assert await get_healthz(reader, writer) == 200
            else:
                assert first == b"HTTP/1.1 503"
                refused += 1
        assert refused == 2, "2 held + 1 of the burst = the cap of 3"
    finally:
        for _, writer in held + streams:
            await close(writer)


async def test_inflight_cap_answers_503(swarm: Swarm, http: aiohttp.ClientSession,
                                        tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    home = await swarm.start("home", skills=[ECHO, gated_skill("slow", gate)],
                             extra={"server": {"max_inflight": 1}})

    async def slow() -> tuple[int, Any]:
        async with http.post(f"{home.url}/v2/tasks", json={"task": "x", "skill": "slow"},
                             headers=home.headers()) as resp:
            return resp.status, await resp.json()

    async def refused() -> bool:  # once the slow request is being worked on
        async with http.get(f"{home.url}/v2/card", headers=home.headers()) as resp:
            if resp.status != 503:
                return False
            assert resp.headers["Retry-After"].isdigit()
            assert_json_error(await resp.json(), "overloaded")
            return True

    first = asyncio.create_task(slow())
    try:
        await wait_until(refused, what="a request refused at the in-flight cap")
        async with http.get(f"{home.url}/healthz") as resp:
            assert resp.status == 200  # never refused, even at the cap
        gate.touch()
        status, body = await first
    finally:
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
    assert status == 200 and body["state"] == "completed"
    async with http.get(f"{home.url}/healthz") as resp:
        assert resp.status == 200


async def test_incident_log_is_one_line_per_class_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="test.incidents")
    interval = 0.3
    incidents = IncidentLog(logging.getLogger("test.incidents"), interval=interval)

    def records() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "test.incidents"]

    def lines() -> list[str]:
        return [r.getMessage() for r in records()]

    for i in range(100):
        incidents.report("slow_headers", f"connection {i}")
    incidents.report("connection_cap", "one")
    assert lines() == ["slow_headers: connection 0", "connection_cap: one"]
    await wait_until(lambda: len(lines()) == 3, what="the summary when the interval ends")
    assert lines()[2] == "slow_headers: 99 more in the last 0.3s (logged once per interval)"
    for _ in range(10):  # a steady trickle: at most one line per interval
        incidents.report("slow_headers", "again")
        await asyncio.sleep(0.06)  # the trickle's pace
    # However long the trickle took, no two lines of a class are closer than an interval
    # (read from the records' own times; close() below flushes at once, as at shutdown).
    times = [r.created for r in records() if r.getMessage().startswith("slow_headers")]
    assert all(later - earlier >= interval * 0.9 for earlier, later in itertools.pairwise(times))
    incidents.close()
    assert sum(int(m.split()[1]) if " more in " in m else 1
               for m in lines() if m.startswith("slow_headers")) == 110
    assert incidents.totals == {"slow_headers": 110, "connection_cap": 1}
