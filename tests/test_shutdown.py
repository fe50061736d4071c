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
            server.proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(10):
                code = await server.proc.wait()
            assert code == 0
            assert "Traceback" not in server.log_path.read_text()
            # The task was not left "working": it ended, saying why.
            server = await ServeProcess.start(config_path, tmp_path / "again.log")
            async with http.get(f"{server.url}/v2/tasks/{task_id}", headers=auth) as resp:
                task = await resp.json()
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
            loop = asyncio.get_running_loop()
            started = loop.time()
            server.proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(20):
                code = await server.proc.wait()
            assert code == 0
            assert loop.time() - started < 10  # not the 30 s grace
            server = await ServeProcess.start(config_path, tmp_path / "again.log")
            async with http.get(f"{server.url}/v2/tasks/{task['id']}", headers=auth) as resp:
                stored = await resp.json()
            assert stored["state"] == "failed"
            assert stored["error"]["code"] == "interrupted_by_shutdown"
    finally:
        await server.stop()
