"""One MCP tool as a skill: a task's words and input become the call's arguments, the
tool's answer becomes the task's parts (docs/mcp.md#mcp-servers-as-skills)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from decimal import Decimal
from typing import Any, Protocol

import anyio
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, CallToolResult, TextContent, Tool

from butler.skills.base import SkillContext, SkillFailed, SkillFunction, SkillOutput, SkillResult
from butler.skills.mcp_servers.content import to_parts
from internal.protocol.a2a.codec.input_schema import with_text


class Server(Protocol):
    """The supervised server a tool belongs to (``supervisor.McpServer``)."""

    @property
    def id(self) -> str: ...
    @property
    def session(self) -> ClientSession | None: ...  # None during an outage
    def lost(self, session: ClientSession) -> None: ...  # broke under a call: restart now
    def calling(self) -> AbstractContextManager[None]: ...  # a call in flight: no pings


def tool_skill(tool: Tool, server: Server, *, max_output_bytes: int) -> SkillFunction:
    async def run(ctx: SkillContext) -> SkillOutput:
        live = server.session
        if live is None:
            raise SkillFailed("skill_unavailable",
                              f"MCP server {server.id} is not running; it is being restarted")
        try:
            # Cancelling the task (its time limit too) cancels this await; the SDK tells
            # the server the request is cancelled.
            with server.calling():
                result = await live.call_tool(tool.name, arguments(tool, ctx.text, ctx.input))
        except MCPError as exc:
            if exc.error.code == CONNECTION_CLOSED:
                server.lost(live)
                raise SkillFailed("skill_unavailable",
                                  f"MCP server {server.id} went away during the call") from None
            raise SkillFailed("tool_error", exc.error.message) from None
        except RuntimeError as exc:  # the SDK held the answer to the tool's output schema
            raise SkillFailed("invalid_output", str(exc).split("\n", 1)[0]) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            server.lost(live)
            raise SkillFailed("skill_unavailable",
                              f"MCP server {server.id} is not running; it is being restarted"
                              ) from None
        return to_result(result, max_output_bytes)

    return run


def arguments(tool: Tool, text: str, given: dict[str, Any]) -> dict[str, Any]:
    """The task's ``input`` is the arguments; its words fill a ``task`` (else ``text``)
    string property the tool declares and the input does not set."""
    return with_text(tool.input_schema, text, {k: _plain(v) for k, v in given.items()})


def _plain(value: Any) -> Any:
    """Butler reads JSON fractions as exact ``Decimal``; a JSON-RPC call needs numbers."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def to_result(result: CallToolResult, cap: int) -> SkillResult:
    """The answer's blocks as parts (``content.to_parts``). An ``isError`` result fails
    the task with ``tool_error``."""
    if result.is_error:
        texts = [c.text for c in result.content if isinstance(c, TextContent)]
        raise SkillFailed("tool_error", "\n".join(texts) or "the tool reported an error")
    structured = result.structured_content
    parts, size = to_parts(result.content, structured if isinstance(structured, dict) else None)
    if size > cap:
        raise SkillFailed("output_too_large", f"the tool answered more than {cap} bytes")
    return SkillResult(parts=tuple(parts))
