"""Hostile peers, seen from the delegating side (item 4 of the hardening issue).

A raw-socket fake peer on 127.0.0.1 port 0 misbehaves in one way per URL path: it hangs,
trickles its answer, sends too much (with and without Content-Length), sends invalid
JSON, redirects to another host, or closes mid-response. Each delegation must end as a
failed task with a clear code within the peer's deadline, and leave nothing behind: no
run in the engine, no connection checked out of the delegator's sessions, no connection left
open to the peer, no growing memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import web

from butler.delegation.delegator import PeerDelegator
from internal.protocol.a2a.model import Task, TaskRequest, TaskState
from tests.delegation_support import free_port
from tests.support import Instance, Swarm, wait_until

PEER_TIMEOUT = 1.0
TASK_TIMEOUT = 2.0  # of the delegated task at home: bounds a peer that never finishes
MAX_RESPONSE = 64 * 1024

# mode -> (expected code, words the message must contain)
EXPECTED = {
    "hang": ("peer_timeout", "did not answer within"),
    "trickle": ("peer_timeout", "did not answer within"),
    "trickle_head": ("peer_timeout", "did not answer within"),
    # Answers "working" to every poll. The task's deadline (not the peer's per-request
    # timeout) ends it; whichever of the two timers wins, the code says it was time.
    "never_finishes": ("peer_timeout|task_timeout", "did not finish"),
    "oversize_length": ("peer_error", "exceeds"),
    "oversize_chunked": ("peer_error", "exceeds"),
    "oversize_until_close": ("peer_error", "exceeds"),
    "invalid_json": ("peer_error", "invalid JSON"),
    "not_a_task": ("peer_error", "invalid task"),
    "html_error": ("peer_error", "invalid JSON"),
    "redirect": ("peer_error", "redirected"),
    "close_mid_response": ("peer_error", "hostile-close_mid_response"),
    "close_without_answer": ("peer_error", "hostile-close_without_answer"),
    "refused": ("peer_unreachable", "cannot connect"),  # nothing listens at its port
}
FAST_MODES = [m for m, (code, _) in EXPECTED.items() if "timeout" not in code]


class HostilePeer:
    """One TCP server; the first path segment of each request picks how it misbehaves."""

    def __init__(self, redirect_to: str) -> None:
        self.redirect_to = redirect_to
        self.active = 0  # connections being served right now
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.active += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            mode = head.split(b" ")[1].decode().split("/")[1]
            await getattr(self, mode)(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.active -= 1
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    @staticmethod
    def _answer(writer: asyncio.StreamWriter, status: str, body: bytes, *extra: str,
                ctype: str = "application/json") -> None:
        headers = [f"HTTP/1.1 {status}", f"Content-Type: {ctype}",
                   f"Content-Length: {len(body)}", "Connection: close", *extra]
        writer.write(("\r\n".join(headers) + "\r\n\r\n").encode() + body)

    @staticmethod
    async def _until_client_leaves(reader: asyncio.StreamReader,
                                   writer: asyncio.StreamWriter, chunk: bytes,
                                   every: float) -> None:
        """Send ``chunk`` every ``every`` seconds until the client closes (60 s at most)."""
        gone = asyncio.create_task(reader.read())
        try:
            async with asyncio.timeout(60):
                while not gone.done():
                    writer.write(chunk)
                    await writer.drain()
                    await asyncio.wait([gone], timeout=every)
        finally:
            gone.cancel()

    async def hang(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # returns when the client gives up

    async def trickle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 50000\r\n\r\n")  # under the cap
        await self._until_client_leaves(reader, writer, b" ", 0.2)

    async def trickle_head(self, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"a" * 5000
        for byte in head:  # a byte every 0.2 s: the head alone would take 17 minutes
            writer.write(bytes([byte]))
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.2):
                    if not await reader.read():
                        return

    async def never_finishes(self, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        self._answer(writer, "200 OK", b'{"id": "p-1", "state": "working"}')

    async def oversize_length(self, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100000000\r\n\r\n")
        await self._until_client_leaves(reader, writer, b" " * 65536, 0)

    async def oversize_chunked(self, reader: asyncio.StreamReader,
                               writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        await self._until_client_leaves(reader, writer, b"2000\r\n" + b" " * 0x2000 + b"\r\n", 0)

    async def oversize_until_close(self, reader: asyncio.StreamReader,
                                   writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\n\r\n")  # no length: the body ends when we close
        await self._until_client_leaves(reader, writer, b" " * 65536, 0)

    async def invalid_json(self, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
        self._answer(writer, "200 OK", b'{"id": "t-1", "state": ')

    async def not_a_task(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        self._answer(writer, "200 OK", b'{"hello": "world"}')

    async def html_error(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        self._answer(writer, "500 Internal Server Error", b"<html>oops</html>",
                     ctype="text/html")

    async def redirect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._answer(writer, "302 Found", b"", f"Location: {self.redirect_to}/v2/tasks")

    async def close_mid_response(self, reader: asyncio.StreamReader,
                                 writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b'Content-Length: 1000\r\n\r\n{"id": "t-1", "st')
        await writer.drain()

    async def close_without_answer(self, reader: asyncio.StreamReader,
                                   writer: asyncio.StreamWriter) -> None:
        return None


@pytest.fixture
async def elsewhere() -> AsyncIterator[tuple[str, list[str]]]:
    """Another host a redirect points to. It would answer; it must never be asked."""
    hits: list[str] = []

    async def record(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"error": {"code": "forbidden", "message": "followed"}},
                                 status=403)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.2", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.2:{port}", hits
    finally:
        await runner.cleanup()


@pytest.fixture
async def hostile(elsewhere: tuple[str, list[str]]) -> AsyncIterator[tuple[HostilePeer, str]]:
    peer = HostilePeer(elsewhere[0])
    url = await peer.start()
    try:
        yield peer, url
    finally:
        await peer.close()


async def start_home(swarm: Swarm, tmp_path: Path, peer_url: str) -> Instance:
    token_file = tmp_path / "peer.token"
    # Words no peer name shares: any 8 characters of a token are redacted wherever they
    # appear (tests/test_secret_fragments.py).
    token_file.write_text("a-token-that-peer-gets-Xq7Lm2\n")
    closed = f"http://127.0.0.1:{free_port()}"
    peers = [{"name": f"hostile-{mode}",
              "url": closed if mode == "refused" else f"{peer_url}/{mode}",
              "capabilities": [f"hostile.{mode}"], "token_file": str(token_file),
              "timeout_seconds": PEER_TIMEOUT, "connect_timeout_seconds": PEER_TIMEOUT,
              "max_response_bytes": MAX_RESPONSE}
             for mode in EXPECTED]
    return await swarm.start("home", skills=[], peers=peers,
                             extra={"tasks": {"default_timeout_seconds": TASK_TIMEOUT}})


async def delegate(home: Instance, mode: str) -> Task:
    """The delegation's end; a peer no deadline cut off would hang here (the test's timeout)."""
    return await home.client().submit(TaskRequest(text="hi",
                                                  capabilities_needed=(f"hostile.{mode}",)))


def delegator(home: Instance) -> PeerDelegator:
    return cast(PeerDelegator, home.daemon.engine.delegator)


async def assert_nothing_left(home: Instance, peer: HostilePeer) -> None:
    """No run, no live task, no cancel of the peer's task on its way (one whose peer
    stopped answering is sent one), no pooled connection in use, no connection held at
    the peer."""
    engine = home.daemon.engine
    await wait_until(lambda: not (peer.active or engine._runs or engine._live
                                  or len(delegator(home).cancels)), 10)
    for _, session in delegator(home)._sessions.values():
        connector: Any = session.connector
        assert not connector._acquired, "every peer connection went back to the pool or closed"
    running = [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("task-")]
    assert running == []


@pytest.mark.parametrize("mode", list(EXPECTED))
async def test_a_hostile_peer_fails_the_delegation_with_a_clear_code(
    swarm: Swarm, tmp_path: Path, hostile: tuple[HostilePeer, str],
    elsewhere: tuple[str, list[str]], mode: str,
) -> None:
    peer, url = hostile
    home = await start_home(swarm, tmp_path, url)
    task = await delegate(home, mode)
    codes, words = EXPECTED[mode]
    assert task.state is TaskState.FAILED
    assert task.error is not None and task.error.code in codes.split("|"), task.error
    assert words in task.error.message and "a-token-that" not in task.error.message
    assert task.skill == "a2a.delegate"
    assert elsewhere[1] == [], "a redirect to another host is never followed"
    await assert_nothing_left(home, peer)


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads RSS from /proc")
async def test_repeated_hostile_delegations_leak_nothing(
    swarm: Swarm, tmp_path: Path, hostile: tuple[HostilePeer, str],
) -> None:
    peer, url = hostile
    home = await start_home(swarm, tmp_path, url)

    async def round_of(n: int) -> None:
        modes = [FAST_MODES[i % len(FAST_MODES)] for i in range(n)]
        for start in range(0, n, 10):  # ten at a time
            results = await asyncio.gather(*(delegate(home, m) for m in modes[start:start + 10]))
            for task, mode in zip(results, modes[start:start + 10], strict=True):
                assert task.error is not None and task.error.code == EXPECTED[mode][0]

    await round_of(20)  # warm-up: caches, pools, SQLite pages
    await assert_nothing_left(home, peer)
    tasks_before = len(asyncio.all_tasks())
    rss_before = rss_bytes()
    await round_of(50)
    await assert_nothing_left(home, peer)
    grown = rss_bytes() - rss_before
    # 50 answers of up to 64 KiB each were read and dropped; a leak of them would be
    # several MiB, and a leak of the oversize bodies far more.
    assert grown < 16 * 1024 * 1024, f"RSS grew by {grown} bytes over 50 delegations"
    assert len(asyncio.all_tasks()) <= tasks_before
