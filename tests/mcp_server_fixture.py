"""A small MCP server for tests/test_mcp_skills.py, run over stdio with the official SDK.

``python tests/mcp_server_fixture.py PIDFILE`` appends its pid to PIDFILE at start, so a
test can tell each (re)started process and check that none is left; ``hang`` writes
PIDFILE.hanging when called and PIDFILE.cancelled when its call is cancelled.
``... PIDFILE --http PORT`` serves streamable HTTP at http://127.0.0.1:PORT/mcp instead;
with ``FIXTURE_TOKEN`` set it answers 401 to a request without that bearer token.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
    ToolAnnotations,
    ToolExecution,
)

# Small payloads of each kind, base64: what ``media`` answers with.
PNG = "iVBORw0KGgo="
WAV = "UklGRiQAAABXQVZF"
BLOB = "AAECAwQF"
MEDIA: list[ContentBlock] = [
    TextContent(text="here"),
    ImageContent(data=PNG, mime_type="image/png"),
    AudioContent(data=WAV, mime_type="audio/wav"),
    ResourceLink(uri="file:///notes/a.md", name="a.md", title="Notes",
                 mime_type="text/markdown"),
    EmbeddedResource(resource=TextResourceContents(uri="file:///b.txt", text="bee",
                                                   mime_type="text/plain")),
    EmbeddedResource(resource=BlobResourceContents(uri="file:///c.bin", blob=BLOB,
                                                   mime_type="application/octet-stream")),
]


class Fixture(MCPServer):
    """The decorator cannot say what 2025-11-25 adds to a tool: set here, by name."""

    async def list_tools(self) -> list[Tool]:
        tools = await super().list_tools()
        return [self._adjusted(t) for t in tools]

    @staticmethod
    def _adjusted(tool: Tool) -> Tool:
        if tool.name == "background":
            return tool.model_copy(update={"execution": ToolExecution(task_support="required")})
        if tool.name == "liar":  # claims a string sum, answers a number
            return tool.model_copy(update={"output_schema": {
                "type": "object", "properties": {"sum": {"type": "string"}}}})
        return tool


server = Fixture("fixture")


@server.tool(description="Add two integers", structured_output=True)
def add(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b}


@server.tool(description="Say the text louder",
             annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False,
                                         open_world_hint=False))
def shout(text: str) -> str:
    return text.upper() + "!"


@server.tool(description="Takes no arguments")
def noon() -> str:
    return "noon"


@server.tool(description="Answers with every kind of content block")
def media() -> CallToolResult:
    return CallToolResult(content=MEDIA)


@server.tool(description="Runs only as an MCP task")
def background() -> str:
    return "never called"


@server.tool(description="Answers other than its output schema says", structured_output=True)
def liar() -> dict[str, int]:
    return {"sum": 1}


@server.tool(description="Never answers")
async def hang() -> str:
    if len(sys.argv) > 1:
        Path(sys.argv[1] + ".hanging").write_text("hanging")
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:  # the client cancelled the request: say so to the test
        if len(sys.argv) > 1:
            Path(sys.argv[1] + ".cancelled").write_text("cancelled")
        raise
    return "never"


@server.tool(description="Blocks the server's own event loop for a while")
async def block(seconds: float) -> str:
    time.sleep(seconds)  # on purpose, in the loop: nothing (a ping included) is answered
    return f"blocked {seconds:g}s"


@server.tool(description="Ends the server process at once")
def crash() -> str:
    os._exit(3)


@server.tool(description="Always fails")
def fail(reason: str = "it went wrong") -> str:
    raise ToolError(reason)


@server.tool(description="Answers with more text than any small cap allows")
def flood(size: int) -> str:
    return "x" * size


if __name__ == "__main__":
    if len(sys.argv) > 1:
        with Path(sys.argv[1]).open("a") as pids:
            pids.write(f"{os.getpid()}\n")
    if len(sys.argv) > 3 and sys.argv[2] == "--http":
        import uvicorn

        app = server.streamable_http_app(host="127.0.0.1")
        token = os.environ.get("FIXTURE_TOKEN", "")

        async def guarded(scope: Any, receive: Any, send: Any) -> None:
            sent = dict(scope.get("headers", ())).get(b"authorization", b"")
            if scope["type"] == "http" and token and sent != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            await app(scope, receive, send)

        uvicorn.run(guarded, host="127.0.0.1", port=int(sys.argv[3]), log_level="warning",
                    lifespan="on")
    else:
        server.run("stdio")
