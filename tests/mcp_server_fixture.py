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

server = MCPServer("fixture")


@server.tool(description="Add two integers", structured_output=True)
def add(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b}


@server.tool(description="Say the text louder")
def shout(text: str) -> str:
    return text.upper() + "!"


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
