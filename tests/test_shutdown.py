"""Graceful shutdown of ``butler serve`` as a real subprocess: SIGTERM lets an in-flight
request finish with 200, then the process exits 0."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Any

import aiohttp

from tests.a2a_support import ASK
from tests.support import (
    ECHO,
    ServeProcess,
    command_skill,
    config_dict,
    gated_skill,
    wait_until,
    write_config,
)


async def refused(host: str, port: int) -> bool:
    """True once the listening socket is closed."""
    try:
        _, writer = await asyncio.open_connection(host, port)
    except (ConnectionRefusedError, ConnectionResetError):  # reset: caught mid-close
        return True
    writer.close()
    await writer.wait_closed()
    return False


async def stop_then_read_back(server: ServeProcess, config_path: Path,
                              http: aiohttp.ClientSession, auth: dict[str, str],
                              task_id: str, *, within: float) -> tuple[ServeProcess, Any]:
    """SIGTERM, which must end the process with 0 (within ``within`` seconds) and no
    traceback; then a restarted daemon's view of ``task_id``. Returns that daemon and the
    task."""
    server.proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(within):
        code = await server.proc.wait()
    assert code == 0
    assert "Traceback" not in server.log_path.read_text()
    again = await ServeProcess.start(config_path, config_path.with_name("again.log"))
    try:
        async with http.get(f"{again.url}/v2/tasks/{task_id}", headers=auth) as resp:
            return again, await resp.json()
    except BaseException:
        await again.stop()
        raise


async def test_sigterm_finishes_the_inflight_request_then_exits_0(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    cfg, tokens = config_dict(tmp_path, "home", skills=[ECHO, gated_skill("slow", gate)])
    server = await ServeProcess.start(write_config(tmp_path, "home", cfg), tmp_path / "home.log")
    auth = {"Authorization": f"Bearer {tokens['operator']}"}
    try:
        async with aiohttp.ClientSession() as http:

            async def slow() -> tuple[int, Any]:
                async with http.post(f"{server.url}/v2/tasks", headers=auth,
                                     json={"task": "x", "skill": "slow"}) as resp:
                    return resp.status, await resp.json()

            # An idle keep-alive connection, opened and used before the signal.
            host, port = server.url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            async with asyncio.timeout(5):
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
            request = asyncio.create_task(slow())

            async def running() -> bool:
                async with http.get(f"{server.url}/v2/tasks?state=working",
                                    headers=auth) as resp:
                    return bool((await resp.json())["tasks"])

            await wait_until(running, what="the daemon running the request")
            server.proc.send_signal(signal.SIGTERM)
            try:
                await wait_until(lambda: refused(host, int(port)),
                                 what="the daemon has begun to stop")
                # No new request starts on a kept-alive connection either: the daemon
                # holds it unanswered while the in-flight request finishes, then closes it.
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                gate.touch()
                async with asyncio.timeout(10):
                    assert await reader.read() == b""
            finally:
                gate.touch()
                writer.close()
                with contextlib.suppress(ConnectionError):
                    await writer.wait_closed()
            async with asyncio.timeout(10):
                status, body = await request
        async with asyncio.timeout(15):
            code = await server.proc.wait()
    finally:
        await server.stop()
    assert status == 200
    assert body["state"] == "completed", body
    assert code == 0
    log = server.log_path.read_text()
    assert "shutting down" in log and "Traceback" not in log


async def test_work_past_the_grace_period_is_failed_and_the_process_still_exits_0(
    tmp_path: Path,
) -> None:
    cfg, tokens = config_dict(tmp_path, "home",
                              skills=[ECHO, command_skill("stuck", ["sleep", "30"])])
    cfg["server"] = {"shutdown_grace_seconds": 0.5}
    config_path = write_config(tmp_path, "home", cfg)
    server = await ServeProcess.start(config_path, tmp_path / "home.log")
    auth = {"Authorization": f"Bearer {tokens['operator']}"}
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{server.url}/v2/tasks", headers=auth,
                                 json={"task": "x", "skill": "stuck", "mode": "async"}) as resp:
                assert resp.status == 202
                task_id = (await resp.json())["id"]
            # The task was not left "working": it ended, saying why.
            server, task = await stop_then_read_back(server, config_path, http, auth,
                                                        task_id, within=10)
            assert task["state"] == "failed"
            assert task["error"]["code"] == "interrupted_by_shutdown"
    finally:
        await server.stop()


async def test_a_task_waiting_for_input_does_not_hold_the_stop(tmp_path: Path) -> None:
    # The stop must not spend the grace on a task that waits for its caller, which no
    # amount of waiting will finish.
    cfg, tokens = config_dict(tmp_path, "home", skills=[ECHO, ASK])
    cfg["server"] = {"shutdown_grace_seconds": 600}
    config_path = write_config(tmp_path, "home", cfg)
    server = await ServeProcess.start(config_path, tmp_path / "home.log")
    auth = {"Authorization": f"Bearer {tokens['operator']}"}
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{server.url}/v2/tasks", headers=auth,
                                 json={"task": "x", "skill": "ask"}) as resp:
                assert resp.status == 200
                task = await resp.json()
            assert task["state"] == "input-required"
            # Were the stop to spend the grace, it would take longer than ``within``.
            server, stored = await stop_then_read_back(server, config_path, http, auth,
                                                       task["id"], within=60)
            assert stored["state"] == "failed"
            assert stored["error"]["code"] == "interrupted_by_shutdown"
    finally:
        await server.stop()
