"""A standard A2A agent built with the official a2a-sdk server, served by uvicorn on
127.0.0.1 port 0: what a Butler delegates to in the interop tests."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    TaskState,
)
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.support import wait_until


@dataclass
class Seen:
    """What the agent received: headers and messages of each request."""

    headers: list[dict[str, str]] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)  # the task id of each cancel
    working: list[str] = field(default_factory=list)  # tasks begun by a "wait" agent


class Shout(AgentExecutor):
    """Answers with the text in upper case: as a task with an artifact, or a message; or
    (``wait``) works until canceled, and honours the cancel; ``ask``: first asks "how
    loud?" (``input-required``), then shouts the answer."""

    def __init__(self, seen: Seen, reply: str) -> None:
        self.seen = seen
        self.reply = reply

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        self.seen.messages.append(context.message)
        loud = context.get_user_input().upper()
        if self.reply == "message":
            await event_queue.enqueue_event(new_text_message(loud))
            return
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if self.reply == "ask" and context.current_task is None:
            await updater.requires_input(new_text_message("how loud?", context_id=task.context_id,
                                                          task_id=task.id))
            return
        await updater.start_work(new_text_message("shouting", context_id=task.context_id,
                                                  task_id=task.id) if self.reply == "ask"
                                 else None)
        if self.reply == "wait":
            self.seen.working.append(task.id)
            await asyncio.Event().wait()  # until the cancel stops it
        await asyncio.sleep(0.05)  # the agent's work time, not a synchronisation
        if self.reply == "fail":
            await updater.failed(new_text_message("cannot shout that"))
            return
        await updater.add_artifact([Part(text=loud)], name="shout")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        self.seen.cancels.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id or "").cancel()


def _bearer(token: str, seen: Seen) -> Callable[..., Awaitable[Response]]:
    async def check(request: Request, call_next: Callable[[Request], Awaitable[Response]]
                    ) -> Response:
        seen.headers.append(dict(request.headers))
        if request.url.path != "/.well-known/agent-card.json" and \
                request.headers.get("authorization") != f"Bearer {token}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await call_next(request)

    return check


@dataclass
class SdkAgent:
    url: str
    seen: Seen
    store: InMemoryTaskStore

    async def state(self, task_id: str) -> str:
        """The state of one of its tasks, as its own store holds it."""
        task = await self.store.get(task_id, ServerCallContext())
        assert task is not None, task_id
        return TaskState.Name(task.status.state)


@contextlib.asynccontextmanager
async def sdk_agent(token: str, *, binding: str = "JSONRPC", version: str = "1.0",
                    streaming: bool = True, reply: str = "task") -> AsyncIterator[SdkAgent]:
    """``binding`` GRPC: the sdk's gRPC server (tests/grpc_support.py), its card on HTTP."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    seen = Seen()
    interface_url = {"JSONRPC": url + "/a2a/jsonrpc", "HTTP+JSON": url}.get(binding, "")
    grpc_server: Any = None
    if binding == "GRPC":  # imported here: only these tests need the grpc extra
        from tests.grpc_support import sdk_grpc_server

        grpc_server, interface_url = sdk_grpc_server(token, seen)
    card = AgentCard(
        name="shouter", description="shouts", version="1.0",
        supported_interfaces=[AgentInterface(
            url=interface_url, protocol_binding=binding, protocol_version=version)],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="shout", name="Shout", description="upper-cases", tags=["x"])])
    store = InMemoryTaskStore()
    handler = DefaultRequestHandler(agent_executor=Shout(seen, reply),
                                    task_store=store, agent_card=card)
    routes: list[Any] = create_agent_card_routes(card)
    routes += create_jsonrpc_routes(handler, "/a2a/jsonrpc", enable_v0_3_compat=True)
    routes += create_rest_routes(handler)
    app = Starlette(routes=routes)
    app.add_middleware(BaseHTTPMiddleware, dispatch=_bearer(token, seen))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                           ws="none"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    if grpc_server is not None:
        from tests.grpc_support import start_sdk_grpc_server

        await start_sdk_grpc_server(grpc_server, handler)
    try:
        await wait_until(lambda: server.started, what="uvicorn serving")
        yield SdkAgent(url, seen, store)
    finally:
        server.should_exit = True
        await serving
        sock.close()
        if grpc_server is not None:
            await grpc_server.stop(None)
