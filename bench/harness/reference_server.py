"""The reference: a minimal official a2a-sdk 1.x server (Starlette + uvicorn) with an echo
AgentExecutor, serving A2A 1.0 JSON-RPC at ``/`` and HTTP+JSON under ``/rest``.

Run by the bench as its own process::

    python bench/harness/reference_server.py --token-hash HEX [--db PATH]

It prints ``reference serving on http://127.0.0.1:PORT`` once it listens. Every route but
``/healthz`` and the agent card needs ``Authorization: Bearer <token>``, checked like
Butler does it (SHA-256 of the token compared in constant time). With ``--db`` tasks go
to the SDK's ``DatabaseTaskStore`` on SQLite (aiosqlite) in WAL mode with
synchronous=NORMAL, Butler's durability; without it, to ``InMemoryTaskStore``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import socket
from typing import Any

import uvicorn
from a2a.helpers.proto_helpers import get_message_text, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import DatabaseTaskStore, InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityScheme,
)
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

Scope = dict[str, Any]
PUBLIC = ("/healthz", "/.well-known/agent-card.json")


class EchoExecutor(AgentExecutor):
    """Creates a task, marks it working, completes it with the user's text."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        text = get_message_text(context.message)
        await updater.complete(updater.new_agent_message([new_text_part(text)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class BearerAuth:
    """Pure ASGI middleware: 401 unless the bearer token hashes to the accepted digest."""

    def __init__(self, app: Any, digest_hex: str) -> None:
        self.app = app
        self.digest = bytes.fromhex(digest_hex)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in PUBLIC:
            auth = dict(scope["headers"]).get(b"authorization", b"")
            scheme, _, token = auth.partition(b" ")
            digest = hashlib.sha256(token.strip()).digest()
            if scheme.lower() != b"bearer" or not hmac.compare_digest(digest, self.digest):
                body = json.dumps({"error": "unauthenticated"}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def card(url: str) -> AgentCard:
    return AgentCard(
        name="reference-echo", description="a2a-sdk echo agent (bench reference)",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=url + "/", protocol_binding="JSONRPC",
                                             protocol_version="1.0"),
                              AgentInterface(url=url + "/rest", protocol_binding="HTTP+JSON",
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes the message",
                           tags=["bench.echo"])],
        security_schemes={"bearer": SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="bearer"))},
    )


async def open_store(db: str | None) -> TaskStore:
    if db is None:
        return InMemoryTaskStore()
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{db}")

    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(engine.sync_engine, "connect", _pragmas)

    store = DatabaseTaskStore(engine)
    await store.initialize()
    return store


async def healthz(_request: Any) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--token-hash", required=True)
    parser.add_argument("--db", help="SQLite file for DatabaseTaskStore (default: in memory)")
    args = parser.parse_args()
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY on accepted connections only for
    # sockets that say so, and without it Nagle + delayed ACKs add 40 ms per response.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    agent_card = card(url)
    handler = DefaultRequestHandler(agent_executor=EchoExecutor(),
                                    task_store=await open_store(args.db),
                                    agent_card=agent_card)
    routes = [Route("/healthz", healthz), *create_agent_card_routes(agent_card),
              *create_rest_routes(handler, path_prefix="/rest"),
              *create_jsonrpc_routes(handler, rpc_url="/")]
    app = BearerAuth(Starlette(routes=routes), args.token_hash)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    print(f"reference serving on {url}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
