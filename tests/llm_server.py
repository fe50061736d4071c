"""An OpenAI-compatible chat-completions server for the planner's tests, on 127.0.0.1
port 0: it answers ``POST /v1/chat/completions`` from a script, one entry per request,
in the real wire format (a JSON answer, or SSE ``data:`` chunks ending with ``[DONE]``),
and records every request it received."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Reply:
    """One scripted answer: ``message`` (content and tool calls) as JSON or streamed;
    or ``raw`` bytes as they are; or ``hang``: never answer."""

    content: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    stream: bool = False
    usage: tuple[int, int] | None = (100, 20)
    raw: bytes | None = None
    status: int = 200
    hang: bool = False


def call(name: str, arguments: dict[str, Any] | str, call_id: str = "") -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id or f"call_{name}", "type": "function",
            "function": {"name": name, "arguments": args}}


@dataclass
class ChatServer:
    script: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    url: str = ""
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(await request.json())
        self.headers.append(dict(request.headers))
        reply = self.script.pop(0) if self.script else Reply(content="(script ended)")
        if reply.hang:
            await self._released.wait()
            return web.Response(status=503)
        if reply.raw is not None:
            return web.Response(body=reply.raw, status=reply.status,
                                content_type="application/json")
        if reply.status != 200:
            # As careless servers do: the credential it refused, quoted back.
            said = f"scripted failure for {request.headers.get('Authorization', '')}"
            return web.json_response({"error": {"message": said}}, status=reply.status)
        if not reply.stream:
            return web.json_response(_whole(reply))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in _chunks(reply):
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def release(self) -> None:
        self._released.set()


def _usage(reply: Reply) -> dict[str, int] | None:
    if reply.usage is None:
        return None
    return {"prompt_tokens": reply.usage[0], "completion_tokens": reply.usage[1],
            "total_tokens": sum(reply.usage)}


def _whole(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        message["tool_calls"] = list(reply.tool_calls)
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "test",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
            "usage": _usage(reply)}


def _chunks(reply: Reply) -> list[dict[str, Any]]:
    """The answer cut the way servers stream it: the text in small pieces, each tool call
    as its name first and then its arguments in two halves; usage in a last chunk."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "test",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    text = reply.content
    out += [chunk({"content": text[i:i + 7]}) for i in range(0, len(text), 7)]
    for index, tool in enumerate(reply.tool_calls):
        args = tool["function"]["arguments"]
        half = len(args) // 2
        out.append(chunk({"tool_calls": [{"index": index, "id": tool["id"], "type": "function",
                                          "function": {"name": tool["function"]["name"],
                                                       "arguments": ""}}]}))
        for piece in (args[:half], args[half:]):
            out.append(chunk({"tool_calls": [{"index": index,
                                              "function": {"arguments": piece}}]}))
    out.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
    usage = _usage(reply)
    if usage is not None:
        out.append({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "test",
                    "choices": [], "usage": usage})
    return out


@asynccontextmanager
async def chat_server(*script: Reply) -> AsyncIterator[ChatServer]:
    server = ChatServer(list(script))
    app = web.Application()
    app.router.add_post(PATH, server.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.url = f"http://127.0.0.1:{port}{PATH}"
    try:
        yield server
    finally:
        server.release()
        await runner.cleanup()
