"""``butler stdio`` as a real child process: A2A JSON-RPC, one line per request and answer."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.a2a_support import ASK
from tests.support import ECHO, REPO, child_env, config_dict, write_config

MAX_LINE = 4096


class StdioProcess:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pending: list[dict[str, Any]] = []  # lines read while looking for another id

    async def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()

    async def send(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        await self.send_raw(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                                        "params": params}).encode() + b"\n")

    async def line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        async with asyncio.timeout(30):
            raw = await self.proc.stdout.readline()
        assert raw.endswith(b"\n"), f"stdout ended: {raw!r}"
        answer: dict[str, Any] = json.loads(raw)
        assert answer["jsonrpc"] == "2.0"
        return answer

    async def answer(self, request_id: Any) -> dict[str, Any]:
        """The next answer with this id; answers to other requests are kept for later."""
        for i, answer in enumerate(self.pending):
            if answer["id"] == request_id:
                return self.pending.pop(i)
        while (answer := await self.line())["id"] != request_id:
            self.pending.append(answer)
        return answer

    async def call(self, request_id: Any, method: str, params: dict[str, Any]) -> Any:
        await self.send(request_id, method, params)
        answer = await self.answer(request_id)
        assert "result" in answer, answer
        return answer["result"]


def _message(text: str, **extra: Any) -> dict[str, Any]:
    return {"message": {"messageId": f"m-{text}", "role": "ROLE_USER",
                        "parts": [{"text": text}], **extra}}


@asynccontextmanager
async def stdio_butler(tmp_path: Path, **extra: Any) -> AsyncIterator[StdioProcess]:
    cfg, _ = config_dict(tmp_path, "embedded", skills=[ECHO, ASK],
                         extra={"server": {"max_body_bytes": MAX_LINE}, **extra})
    path = write_config(tmp_path, "embedded", cfg)
    with (tmp_path / "stderr.log").open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "butler", "stdio", "-c", str(path),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
            cwd=REPO, env=child_env())
    try:
        yield StdioProcess(proc)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_send_stream_get_cancel_and_both_versions(tmp_path: Path) -> None:
    # The configured port is taken: stdio mode must not try to bind it.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with stdio_butler(tmp_path, configurations={"a2a": {"port": port}}) as butler:
            sent = await butler.call(1, "SendMessage", _message("echo hello"))
            task = sent["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED"
            assert [p["text"] for a in task["artifacts"] for p in a["parts"]] == ["echo hello"]
            got = await butler.call("get", "GetTask", {"id": task["id"]})
            assert got["id"] == task["id"] and got["status"]["state"] == "TASK_STATE_COMPLETED"

            # A 0.3 method, chosen by its name alone: the answer is in 0.3's shape.
            old = await butler.call(3, "message/send", {"message": {
                "messageId": "m-old", "role": "user", "kind": "message",
                "parts": [{"kind": "text", "text": "echo from 0.3"}]}})
            assert old["kind"] == "task" and old["status"]["state"] == "completed", old
            old_got = await butler.call(4, "tasks/get", {"id": old["id"]})
            assert old_got["kind"] == "task"

            # A stream: one answer line per event, each with the request's id.
            await butler.send("s", "SendStreamingMessage", _message("echo streamed"))
            events = [await butler.answer("s")]
            while "statusUpdate" not in events[-1]["result"] or events[-1]["result"][
                    "statusUpdate"]["status"]["state"] != "TASK_STATE_COMPLETED":
                events.append(await butler.answer("s"))
            assert "task" in events[0]["result"] and len(events) >= 2
            assert any("artifactUpdate" in e["result"] for e in events)

            # A task waiting for input, followed by a subscription while other requests
            # go on beside it (answers come out of order, each with its id), then canceled.
            asked = (await butler.call(5, "SendMessage", _message("hi", metadata={
                "skill": "ask"})))["task"]
            assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            await butler.send("sub", "SubscribeToTask", {"id": asked["id"]})
            first = await butler.answer("sub")
            assert first["result"]["task"]["id"] == asked["id"]
            assert (await butler.call(6, "GetTask", {"id": asked["id"]}))["id"] == asked["id"]
            canceled = await butler.call(7, "CancelTask", {"id": asked["id"]})
            assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
            last = await butler.answer("sub")
            assert last["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"

            # A JSON-RPC error is an answer like any other.
            await butler.send(8, "GetTask", {"id": "no-such-task"})
            assert (await butler.answer(8))["error"]["code"] == -32001
            await butler.send(9, "tasks/nope", {})
            assert (await butler.answer(9))["error"]["code"] == -32601

            assert butler.proc.stdin is not None
            butler.proc.stdin.close()
            async with asyncio.timeout(30):
                assert await butler.proc.wait() == 0
    assert not butler.pending
    log = (tmp_path / "stderr.log").read_text()
    assert "serving A2A JSON-RPC on stdio" in log and "stopped" in log


async def test_malformed_lines_each_get_one_error_and_the_loop_goes_on(tmp_path: Path) -> None:
    async with stdio_butler(tmp_path) as butler:
        bad = [
            (b"this is not json", -32700),
            (b"\xff\xfe{}", -32700),  # not UTF-8
            (b"[1, 2]", -32600),  # a batch
            (b'"a string"', -32600),  # not an object
            (b'{"jsonrpc": "2.0", "method": "GetTask", "params": {}}', -32600),  # no id
            (b'{"jsonrpc": "2.0", "id": 1, "method": "x"' + b" " * MAX_LINE + b"}", -32600),
        ]
        for line, _ in bad:
            await butler.send_raw(line + b"\n")
        await butler.send_raw(b"\n  \n")  # blank lines carry nothing and get no answer
        answers = [await butler.line() for _ in bad]
        assert all(a["id"] is None for a in answers), answers
        assert sorted(a["error"]["code"] for a in answers) == sorted(code for _, code in bad)
        sent = await butler.call("after", "SendMessage", _message("echo still here"))
        assert sent["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        # The last request may end without a newline: the end of input ends the line.
        await butler.send_raw(json.dumps({"jsonrpc": "2.0", "id": "last", "method": "GetTask",
                                          "params": {"id": sent["task"]["id"]}}).encode())
        assert butler.proc.stdin is not None
        butler.proc.stdin.close()
        assert (await butler.answer("last"))["result"]["id"] == sent["task"]["id"]
        async with asyncio.timeout(30):
            assert await butler.proc.wait() == 0
