"""Butler as an MCP server: its skills and its swarm as MCP tools (docs/mcp.md).

Each call is a task of the same engine, under the same rules as one sent over A2A
(admission, loop, depth, budget, spend caps, audit, trace): a tool is a task for that
skill, ``delegate`` is a task by capabilities, which the swarm decision runs locally or
sends to a peer. A refusal or a failed task is a tool result with ``isError`` and the
machine-readable code, so the model behind the host sees why.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

import mcp.types as types
from mcp.server import Server, ServerRequestContext

from butler.edges.mcp_names import tool_names
from butler.skills.catalog import Skill, SkillCatalog
from butler.skills.mcp_servers.content import (
    MAX_INLINE_BYTES,
    structured_content_in,
    to_content,
)
from internal.protocol.a2a.codec.input_schema import SchemaCheck
from internal.protocol.a2a.model import (
    ButlerError,
    Envelope,
    Identity,
    RequestError,
    Task,
    TaskRequest,
    task_artifacts,
)
from internal.protocol.a2a.server import TaskService

log = logging.getLogger("butler.mcp")

# Whoever can start ``butler mcp`` owns its config and data folder: the operator, as for
# ``butler stdio``. A name of its own, so the audit trail says which edge a task came by.
MCP_IDENTITY = Identity(name="mcp", tier="admin")
DELEGATE = "delegate"
# What this edge cannot carry (docs/mcp.md#what-maps): a tool call is answered once, so a
# task that asks for input cannot be (see _follow); arguments are JSON; large files stay out.
MCP_CAVEATS = (
    "input-required tasks are canceled",
    "no file parts in: tool arguments are JSON",
    f"a file over {MAX_INLINE_BYTES} bytes is described, not inlined; a file by URL is a "
    "resource_link",
)
# MCP leaves ``_meta`` to implementations, under a prefix of their own: a tool's bridge
# fidelity and skill id, a result's task (id, state, trace id).
FIDELITY_META = "butler/bridge_fidelity"
SKILL_ID_META = "butler/skill_id"
TASK_META = "butler/task"
# A skill that declares no input schema takes its task in words.
TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "what to do, in words"}},
}
DELEGATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "capabilities": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                         "description": "what the work needs, e.g. [\"memory.search\"]"},
        "task": {"type": "string", "description": "what to do, in words"},
        "budget_usd": {"type": "string", "description": "the most to spend (a decimal)"},
    },
    "required": ["capabilities", "task"],
}


class ButlerTools:
    """The tools (from the skills ``mcp_server.allowed_capabilities`` lets through) and
    their calls, as tasks of ``service``."""

    def __init__(self, service: TaskService, catalog: SkillCatalog,
                 caller: Identity = MCP_IDENTITY, names: _Names | None = None) -> None:
        self.service = service
        self.catalog = catalog
        self.caller = caller
        self._names = names or _Names(catalog)

    def as_caller(self, caller: Identity) -> ButlerTools:
        return ButlerTools(self.service, self.catalog, caller, self._names)

    def tools(self) -> list[types.Tool]:
        tools = [types.Tool(
            name=DELEGATE, input_schema=DELEGATE_SCHEMA,
            description="Delegate a task to whichever local skill or peer agent provides the "
                        "capabilities, within the swarm's depth, loop and budget rules.")]
        names = self._names.get()
        for skill in self.catalog.visible(self.caller):
            if skill.id == DELEGATE:
                log.warning("skill %r is hidden behind the built-in delegate tool", DELEGATE)
                continue
            config = skill.config
            fidelity = skill.fidelity.with_caveats(*MCP_CAVEATS)
            name = names[skill.id]
            annotations = config.tool_annotations
            tools.append(types.Tool(
                # A renamed skill keeps its id in the title, which a host shows people.
                name=name, title=config.name if name == skill.id else skill.id,
                description=config.description or config.name,
                input_schema=config.input_schema or TASK_SCHEMA,
                output_schema=config.output_schema,
                annotations=None if annotations is None else
                types.ToolAnnotations.model_validate(annotations),
                _meta={FIDELITY_META: fidelity.to_dict(), SKILL_ID_META: skill.id}))
        return tools

    def _skill(self, name: str) -> Skill | None:
        """The visible skill a call names: by its tool name, or by its skill id."""
        names = self._names.get()
        visible = self.catalog.visible(self.caller)
        return (next((s for s in visible if names.get(s.id) == name), None)
                or next((s for s in visible if s.id == name), None))

    def _request(self, name: str, arguments: dict[str, Any]) -> tuple[TaskRequest, Envelope]:
        """The task for a call. A skill's declared schema is checked by the engine, as on
        every binding; the schemas of this edge's own making are checked here."""
        text = arguments.get("task", "")
        skill = None if name == DELEGATE else self._skill(name)
        if name != DELEGATE and skill is None:
            raise RequestError("not_found", f"no tool named {name!r}")
        if skill is not None and skill.config.input_schema is not None:
            # The declared schema is the skill's input: the arguments go whole, and a
            # ``task`` string among them is the text as well.
            return (TaskRequest(text=text if isinstance(text, str) else "",
                                input=dict(arguments), skill=skill.id, blocking=False),
                    Envelope())
        if skill is not None:
            _own_schema("task").check("", arguments)
            rest = {k: v for k, v in arguments.items() if k != "task"}
            return TaskRequest(text=text, input=rest, skill=skill.id, blocking=False), Envelope()
        _own_schema(DELEGATE).check("", arguments)
        return (TaskRequest(text=text, capabilities_needed=tuple(arguments["capabilities"]),
                            blocking=False),
                Envelope(budget_usd=_budget(arguments.get("budget_usd"))))

    async def call(self, name: str, arguments: dict[str, Any],
                   ctx: ServerRequestContext[Any, Any] | None = None) -> types.CallToolResult:
        """Run the task to its end. Canceling the call (the host's cancel notification)
        cancels the task."""
        try:
            request, envelope = self._request(name, arguments)
            task = await self.service.submit(self.caller, request, envelope)
        except ButlerError as err:
            return _error(err.code, err.message, err.details)
        try:
            task = await self._follow(task, ctx)
        except asyncio.CancelledError:
            await asyncio.shield(self._cancel(task))
            raise
        except ButlerError as err:  # following it failed (purged meanwhile, say)
            return _error(err.code, err.message, err.details)
        skill = None if request.skill is None else self.catalog.find(request.skill)
        version = "" if ctx is None else ctx.session.protocol_version
        return _result(task, None if skill is None else skill.output_check, version)

    async def _follow(self, task: Task, ctx: ServerRequestContext[Any, Any] | None) -> Task:
        steps = 0
        async for event in self.service.events(self.caller, task.id):
            task = event.task
            if task.state.terminal:
                break
            if task.state.interrupted:  # an MCP host cannot answer: the task ends here
                await self._cancel(task)
                return task
            if event.kind == "status" and task.status_message:
                steps += 1
                await _progress(ctx, steps, task.status_message)
        return task

    async def _cancel(self, task: Task) -> None:
        try:
            await self.service.cancel(self.caller, task.id)
        except ButlerError as err:  # it ended meanwhile
            log.debug("cancel of %s: %s", task.id, err.code)


async def _progress(ctx: ServerRequestContext[Any, Any] | None, step: int, message: str) -> None:
    """A progress notification, when the host asked for them (a progress token)."""
    token = ctx.meta.get("progress_token") if ctx is not None and ctx.meta is not None else None
    if ctx is None or token is None:
        return
    await ctx.session.send_progress_notification(
        token, step, None, message,
        related_request_id=None if ctx.request_id is None else str(ctx.request_id))


@functools.cache
def _own_schema(tool: str) -> SchemaCheck:
    """The compiled schema of ``delegate`` or of a skill that declares none."""
    return SchemaCheck(DELEGATE_SCHEMA if tool == DELEGATE else TASK_SCHEMA)


def _budget(value: Any) -> Decimal | None:
    if value is None:
        return None
    try:
        budget = Decimal(str(value))
    except InvalidOperation:
        raise RequestError("invalid_params", "budget_usd must be a decimal number") from None
    if not budget.is_finite() or budget < 0:
        raise RequestError("invalid_params", "budget_usd must be a finite amount, 0 or more")
    return budget


def _error(code: str, message: str, details: dict[str, Any] | None = None,
           meta: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=f"{code}: {message}")], is_error=True,
        structured_content={"code": code, "message": message, **(details or {})}, _meta=meta)


def _result(task: Task, output: SchemaCheck | None, version: str) -> types.CallToolResult:
    """A completed task's parts as content, its one data part as ``structuredContent``
    (held to the skill's output schema, when it has one), as far as the session's protocol
    ``version`` has words for them; the task itself in ``_meta``."""
    meta = {TASK_META: {"id": task.wire_id, "state": task.state.value,
                        "trace_id": task.trace_id}}
    if task.state.value != "completed":
        error = task.error
        code = error.code if error else f"task_{task.state.value}".replace("-", "_")
        message = error.message if error else (task.status_message or task.state.value)
        return _error(code, message, meta=meta)
    parts = [part for artifact in task_artifacts(task) for part in artifact.parts]
    content, structured = to_content(parts, f"butler:task/{task.wire_id}", version)
    if output is not None:
        # MCP hosts hold a tool's answer to its output schema: one that does not conform
        # is the tool's error, said here rather than left for the host to find.
        found = ("", "the answer has no single data part", "") if structured is None \
            else output.problem(structured)
        if found is not None:
            return _error("invalid_output", f"output{found[0]}: {found[1]}",
                          {"path": found[0]}, meta)
    if not structured_content_in(version):
        structured = None
    return types.CallToolResult(content=content, structured_content=structured, _meta=meta)


class _Names:
    """The tool names of the catalog's skills, worked out again when its skills change
    (an MCP server's tools come and go)."""

    def __init__(self, catalog: SkillCatalog) -> None:
        self._catalog = catalog
        self._made: tuple[int, dict[str, str]] = (-1, {})

    def get(self) -> dict[str, str]:
        generation, names = self._made
        if generation != self._catalog.generation:
            names = tool_names(self._catalog.ids(), reserved=(DELEGATE,))
            self._made = (self._catalog.generation, names)
        return names


def mcp_server(tools: ButlerTools, name: str, version: str,
               caller: Callable[[Any], Identity] | None = None) -> Server[Any]:
    """``caller``, when given, names each request's caller from the request the transport
    attached (over HTTP: the authenticated token's identity); else it is ``tools.caller``."""
    def tools_for(ctx: ServerRequestContext[Any, Any]) -> ButlerTools:
        return tools if caller is None else tools.as_caller(caller(ctx.request))

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools_for(ctx).tools())

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        return await tools_for(ctx).call(params.name, params.arguments or {}, ctx)

    return Server(name, version=version, on_list_tools=list_tools, on_call_tool=call_tool)
