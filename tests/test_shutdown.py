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
from tests.support import ECHO, ServeProcess, command_skill, config_dict, write_config


async def refused(host: str, port: int) -> None:
    """Until the listening socket is closed."""
    while True:
        try:
            _, writer = await asyncio.open_connection(host, port)
        except (ConnectionRefusedError, ConnectionResetError):  # reset: caught mid-close
            return
        writer.close()
        await writer.wait_closed()
        await asyncio.sleep(0.02)


async def stop_then_read_back(server: ServeProcess, config_path: Path,
                              http: aiohttp.ClientSession, auth: dict[str, str],
                              task_id: str, *, within: float) -> tuple[ServeProcess, float, Any]:
    """SIGTERM, which must end the process with 0 (within ``within`` seconds) and no
    traceback; then a restarted daemon's view of ``task_id``. Returns that daemon, the
    seconds the stop took, and the task."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    server.proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(within):
        code = await server.proc.wait()
    took = loop.time() - started
    assert code == 0
    assert "Traceback" not in server.log_path.read_text()
    again = await ServeProcess.start(config_path, config_path.with_name("again.log"))
    try:
        async with http.get(f"{again.url}/v2/tasks/{task_id}", headers=auth) as resp:
            return again, took, await resp.json()
    except BaseException:
        await again.stop()
        raise


async def test_sigterm_finishes_the_inflight_request_then_exits_0(tmp_path: Path) -> None:
    cfg, tokens = config_dict(tmp_path, "home",
                              skills=[ECHO, command_skill("slow", ["sleep", "1"])])
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
            async with asyncio.timeout(5):  # until the daemon is running it
                while True:
                    await asyncio.sleep(0.05)
                    async with http.get(f"{server.url}/v2/tasks?state=working",
                                        headers=auth) as resp:
                        if (await resp.json())["tasks"]:
                            break
            server.proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(5):
                    await refused(host, int(port))  # the daemon has begun to stop
                # No new request starts on a kept-alive connection either.
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                async with asyncio.timeout(10):
                    assert await reader.read() == b""
            finally:
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
            server, _, task = await stop_then_read_back(server, config_path, http, auth,
                                                        task_id, within=10)
            assert task["state"] == "failed"
            assert task["error"]["code"] == "interrupted_by_shutdown"
    finally:
        await server.stop()


async def test_a_task_waiting_for_input_does_not_hold_the_stop(tmp_path: Path) -> None:
    # The default grace (30 s): the stop must not spend it on a task that waits for its
    # caller, which no amount of waiting will finish.
    cfg, tokens = config_dict(tmp_path, "home", skills=[ECHO, ASK])
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
            server, took, stored = await stop_then_read_back(server, config_path, http, auth,
                                                             task["id"], within=20)
            assert took < 10  # not the 30 s grace
            assert stored["state"] == "failed"
            assert stored["error"]["code"] == "interrupted_by_shutdown"
    finally:
        await server.stop()
