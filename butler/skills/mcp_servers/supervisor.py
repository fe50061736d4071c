"""An MCP server behind a skill entry: started over stdio (or reached over streamable
HTTP), its tools published as skills, watched, restarted with back-off when it dies, and
ended when the daemon stops.

The SDK's context managers (``stdio_client``, ``ClientSession``) own the process: they
are entered and left in the one task that supervises it, as anyio requires, and leaving
them ends the server (stdin closed, then SIGTERM and SIGKILL to its process group).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Collection, Iterable, Iterator
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import PaginatedRequestParams, Tool

from butler.config.common import ID
from butler.config.model import McpToolsConfig, SkillConfig
from butler.config.skills_peers import MAX_INPUT_SCHEMA_BYTES
from butler.skills.catalog import Skill, SkillCatalog
from butler.skills.child_env import child_environment
from butler.skills.fidelity import Fidelity
from butler.skills.mcp_servers.http_bridge import GuardedTransport
from butler.skills.mcp_servers.tool import tool_skill
from internal.protocol.a2a.codec.input_schema import schema_problem

log = logging.getLogger("butler.skills.mcp_servers")

START_SECONDS = 15.0  # for a server to start, initialize and list its tools
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
# A server that ran this long before it died starts again from the first back-off.
STEADY_SECONDS = 60.0
# Without a call in flight only a ping notices that a server has died; a call in flight
# notices by itself (its stream closes) and is bounded by the skill's time limit, so a
# server busy with a call is never pinged (a tool may block the server's loop meanwhile).
PING_SECONDS = 5.0


class McpServer:
    """One process (or HTTP session) per ``mcp`` entry, shared by all its tools."""

    def __init__(self, config: SkillConfig, catalog: SkillCatalog,
                 secret_env: Collection[str]) -> None:
        self.secret_env = secret_env
        assert config.mcp is not None
        self.config = config
        self.mcp: McpToolsConfig = config.mcp
        self.catalog = catalog
        self.session: ClientSession | None = None
        self.calls = 0  # calls in flight on ``session``
        self._lost = asyncio.Event()
        self._first_try = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def id(self) -> str:
        return self.config.id

    async def start(self) -> None:
        """Start supervising; returns after the first attempt, whether it worked or not
        (a server that failed is retried in the background)."""
        self._task = asyncio.create_task(self._supervise(), name=f"mcp-server-{self.id}")
        await self._first_try.wait()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def lost(self, session: ClientSession) -> None:
        if session is self.session:  # not a call's news of a session already replaced
            self._lost.set()

    def busy(self) -> bool:
        return self.calls > 0

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """Around each call: while one is in flight the server is not pinged."""
        self.calls += 1
        try:
            yield
        finally:
            self.calls -= 1

    async def _supervise(self) -> None:
        backoff = FIRST_BACKOFF_SECONDS
        while True:
            began = time.monotonic()
            try:
                await self._run_once()
                problem = "connection lost"
            except Exception as exc:  # whatever ended it, it is restarted
                problem = _reason(exc)
            finally:
                self.session = None
                self._first_try.set()
            if time.monotonic() - began >= STEADY_SECONDS:
                backoff = FIRST_BACKOFF_SECONDS
            log.warning("MCP server %s (%s) is not running (%s); restarting in %gs",
                        self.id, self.mcp.url or (self.mcp.command or ("?",))[0], problem,
                        backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    async def _run_once(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            session = await self._open(stack)
            try:
                async with asyncio.timeout(START_SECONDS):
                    await session.initialize()
                    tools = await _list_tools(session)
            except TimeoutError:
                raise ConnectionError("no answer to initialize and tools/list within "
                                      f"{START_SECONDS:g}s") from None
            self.catalog.provide(self.id, self._skills(tools))
            self._lost.clear()
            self.session = session
            self._first_try.set()
            log.info("MCP server %s started with %d tool(s)", self.id, len(tools))
            await self._watch(session)

    async def _open(self, stack: contextlib.AsyncExitStack) -> ClientSession:
        """A session with the server, over stdio to its process or over streamable HTTP
        to its URL, held open by ``stack``."""
        if self.mcp.url is not None:
            client = await stack.enter_async_context(
                httpx2.AsyncClient(transport=GuardedTransport(self.mcp.url, self.mcp.token)))
            read, write = await stack.enter_async_context(
                streamable_http_client(self.mcp.url, http_client=client))
        else:
            assert self.mcp.command is not None
            argv = self.mcp.command
            # The daemon's environment without its tokens, as a command skill gets it.
            params = StdioServerParameters(command=argv[0], args=list(argv[1:]),
                                           env=child_environment(self.secret_env))
            read, write = await stack.enter_async_context(stdio_client(params))
        return await stack.enter_async_context(ClientSession(read, write))

    async def _watch(self, session: ClientSession) -> None:
        """Until a call finds the session broken, or an idle server misses a ping. A server
        stuck under a call is judged once its calls have timed out: it is idle then."""
        while not self._lost.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PING_SECONDS):
                    await self._lost.wait()
                    return
            if self.busy():
                continue
            try:
                async with asyncio.timeout(PING_SECONDS):
                    await session.send_ping()
            except TimeoutError:
                if self.busy():  # a call began meanwhile: its own time limit judges it
                    continue
                raise ConnectionError(f"no answer to a ping within {PING_SECONDS:g}s") from None

    def _skills(self, tools: list[Tool]) -> list[Skill]:
        """A skill per tool (or per listed tool), ``<entry id>.<tool name>``. The last list
        stays published through an outage: its tasks fail ``skill_unavailable`` meanwhile."""
        wanted = self.mcp.tools
        if wanted is not None:
            missing = set(wanted) - {t.name for t in tools}
            if missing:
                log.warning("MCP server %s has no tool(s) %s", self.id, ", ".join(sorted(missing)))
        skills = []
        for tool in tools:
            if wanted is not None and tool.name not in wanted:
                continue
            skill_id = f"{self.id}.{tool.name}"
            if not ID.fullmatch(skill_id):
                log.warning("MCP server %s: tool %r left out, %r is not a skill id",
                            self.id, tool.name, skill_id)
                continue
            config = dataclasses.replace(
                self.config, id=skill_id, name=tool.title or tool.name,
                description=tool.description or self.config.description,
                capabilities=(*self.config.capabilities, skill_id),
                input_schema=self.config.input_schema or _object_schema(tool.input_schema),
                output_schema=self.config.output_schema or _object_schema(tool.output_schema),
                tool_annotations=None if tool.annotations is None else
                tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True))
            fidelity = FIDELITY
            if tool.execution is not None and tool.execution.task_support == "required":
                log.warning("MCP server %s: tool %r is withheld: it runs only as an MCP task "
                            "(taskSupport: required), which Butler does not call", self.id,
                            tool.name)
                fidelity = TASK_REQUIRED
            skills.append(Skill(config, tool_skill(
                tool, self, max_output_bytes=self.config.max_output_bytes), fidelity))
        return skills


# What an MCP tool cannot carry of the skill API (docs/skills.md, "Bridge fidelity").
FIDELITY = Fidelity("adapted", (
    "no streaming: the tool's answer arrives at the end",
    "no input-required: a tool cannot ask its caller for more",
    "a request's file parts do not reach the tool: its arguments are JSON",
))
# A tool that must be called as an MCP task (2025-11-25 tasks utility): on no card.
TASK_REQUIRED = Fidelity("unsupported", (
    "runs only as an MCP task (execution.taskSupport: required), which Butler does not call",
))


def _object_schema(schema: object) -> dict[str, Any] | None:
    """The tool's own input (or output) schema, kept as the skill's when it describes an
    object, is valid JSON Schema and is no larger than a configured one may be (it goes on
    the card, which registries cap)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    try:
        text = json.dumps(schema, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    if len(text.encode()) > MAX_INPUT_SCHEMA_BYTES:
        return None
    kept: dict[str, Any] = json.loads(text)
    if (problem := schema_problem(kept)) is not None:
        log.warning("an MCP tool's schema is left out: %s", problem)
        return None
    return kept


def _reason(exc: BaseException) -> str:
    """What went wrong, in words: the SDK's task groups wrap it in exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _list_tools(session: ClientSession) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(
            params=None if cursor is None else PaginatedRequestParams(cursor=cursor))
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


async def start_servers(configs: Iterable[SkillConfig], catalog: SkillCatalog,
                        secret_env: Collection[str]) -> list[McpServer]:
    """One supervised server per ``mcp`` entry, all started at once; each has had its
    first try when this returns."""
    servers = [McpServer(c, catalog, secret_env) for c in configs if c.mcp is not None]
    try:
        await asyncio.gather(*(s.start() for s in servers))
    except BaseException:  # a start-up cut short leaves no server behind
        await stop_servers(servers)
        raise
    return servers


async def stop_servers(servers: list[McpServer]) -> None:
    await asyncio.gather(*(s.aclose() for s in servers))
