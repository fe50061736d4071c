"""Run by the a2a-sdk 0.3.26 interpreter (tests/sdk03_support.py), never imported by the
suite: an agent built the way the 0.3 SDK's samples build one. ``python agent.py TOKEN
MODE CARD`` listens on 127.0.0.1 port 0 and prints ``{"port": N}``; it answers in upper
case. MODE ``updater``: only the TaskUpdater pattern, so a stream begins with a
``status-update``; ``task``: the task first; ``wait``: the task first, then it works until
canceled, and honours the cancel (``GET /test/seen`` lists the tasks begun and the
cancels received); ``ask``: the task first, asking "how loud?" (``input-required``), then
shouting the answer. CARD ``new``: /.well-known/agent-card.json;
``old``: only /.well-known/agent.json (0.2-era agents)."""

from __future__ import annotations

import asyncio
import json
import socket
import sys

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Part, TextPart
from a2a.utils import new_task
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

TOKEN, MODE, CARD = sys.argv[1:4]
SEEN: dict[str, list[str]] = {"working": [], "cancels": []}


class Shout(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        loud = context.get_user_input().upper()
        first = context.current_task is None
        if MODE in ("task", "wait", "ask") and first and context.message is not None:
            task = new_task(context.message)
            await event_queue.enqueue_event(task)
            task_id, context_id = task.id, task.context_id
        else:
            task_id, context_id = context.task_id or "", context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        if MODE == "ask" and first:
            await updater.requires_input(updater.new_agent_message(
                [Part(root=TextPart(text="how loud?"))]), final=True)
            return
        await updater.start_work()
        if MODE == "wait":
            SEEN["working"].append(task_id)
            await asyncio.Event().wait()  # until the cancel stops it
        await updater.add_artifact([Part(root=TextPart(text=loud))], name="shout")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        if MODE != "wait":
            raise NotImplementedError
        SEEN["cancels"].append(context.task_id or "")
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class Bearer(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next):  # type: ignore[no-untyped-def]
        if request.url.path.startswith("/.well-known/"):
            response: Response = await call_next(request)
            return response
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse({"error": "unauthenticated"}, status_code=401)
        return await call_next(request)


async def seen(request: Request) -> Response:
    return JSONResponse(SEEN)


def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections wait in the backlog until uvicorn accepts them
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name="shouter 0.3", description="says it louder", url=url, version="1",
        capabilities=AgentCapabilities(streaming=True), default_input_modes=["text/plain"],
        default_output_modes=["text/plain"], preferred_transport="JSONRPC",
        skills=[AgentSkill(id="shout", name="shout", description="upper case", tags=["shout"])])
    handler = DefaultRequestHandler(agent_executor=Shout(), task_store=InMemoryTaskStore())
    app = A2AStarletteApplication(agent_card=card, http_handler=handler).build(
        agent_card_url="/.well-known/agent.json" if CARD == "old" else
        "/.well-known/agent-card.json")
    app.add_route("/test/seen", seen, methods=["GET"])
    app.add_middleware(Bearer)
    print(json.dumps({"port": port}), flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


main()
