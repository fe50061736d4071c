"""Outbound client for standard A2A agents (``a2a.delegate`` to a non-Butler peer).

Reads the agent's card, picks its A2A 1.0 JSON-RPC, HTTP+JSON or gRPC interface (gRPC
over ``_grpc.py``, with the ``grpc`` extra; JSON-RPC 0.3 when that is all the card
offers), sends the task with the swarm envelope, and
follows it until it ends or waits on its caller: over a stream when the agent offers
one, else by polling. Transport problems become ``DelegationFailed`` (the delegator
tries another peer); a Butler's refusal keeps its class (never retried).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import logging
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from internal.http import OutboundGuard
from internal.protocol.a2a.client._butler import transport_errors
from internal.protocol.a2a.client._grpc_channels import GrpcChannels
from internal.protocol.a2a.codec import a2a_v03, a2a_v1, exact_json, swarm_extension
from internal.protocol.a2a.codec.envelope import TRACE_HEADER, TREE_HEADER
from internal.protocol.a2a.codec.peer_answers import (
    apply_event,
    bad_answer,
    decode_task,
    message_task,
    peer_error,
)
from internal.protocol.a2a.model import (
    LEGACY_CARD_PATH,
    LEGACY_VERSION,
    PROTOCOL_VERSION,
    VERSION_HEADER,
    WELL_KNOWN_CARD_PATH,
    ButlerError,
    DelegationFailed,
    Part,
    Task,
    TaskRequest,
    interrupted_or_terminal,
    version_matches,
)

log = logging.getLogger("butler.delegation")
_PREFERENCE = (("JSONRPC", PROTOCOL_VERSION), ("HTTP+JSON", PROTOCOL_VERSION),
               ("GRPC", PROTOCOL_VERSION), ("JSONRPC", LEGACY_VERSION))


@dataclass(frozen=True)
class Interface:
    binding: str
    version: str
    url: str


def offered_interfaces(card: Mapping[str, Any]) -> list[Interface]:
    """Every interface a card names, 1.0 (``supportedInterfaces``) or 0.3 (``url``,
    ``preferredTransport``, ``additionalInterfaces``), in the card's order."""
    offered: list[Interface] = []
    for raw in card.get("supportedInterfaces") or []:
        if isinstance(raw, dict) and isinstance(raw.get("url"), str):
            offered.append(Interface(str(raw.get("protocolBinding", "")),
                                     str(raw.get("protocolVersion", "")), raw["url"]))
    if not offered and isinstance(card.get("url"), str):  # a 0.3 card
        version = str(card.get("protocolVersion") or LEGACY_VERSION)
        offered.append(Interface(str(card.get("preferredTransport") or "JSONRPC"), version,
                                 card["url"]))
        for raw in card.get("additionalInterfaces") or []:
            if isinstance(raw, dict) and isinstance(raw.get("url"), str):
                offered.append(Interface(str(raw.get("transport", "")), version, raw["url"]))
    return offered


@functools.cache
def grpc_installed() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("grpc", "a2a"))


def choose_interface(card: Mapping[str, Any], peer: str) -> Interface:
    """JSON-RPC 1.0, else HTTP+JSON 1.0, else gRPC 1.0 (with the ``grpc`` extra), else
    JSON-RPC 0.3 (also from a 0.3-only card)."""
    offered = offered_interfaces(card)
    for binding, version in _PREFERENCE:
        if binding == "GRPC" and not grpc_installed():
            continue
        for iface in offered:
            if iface.binding == binding and version_matches(iface.version, version):
                return Interface(binding, version, iface.url.rstrip("/"))
    grpc = "" if grpc_installed() or not any(i.binding == "GRPC" for i in offered) else (
        " (it offers gRPC: install the grpc extra, pip install 'butler-a2a[grpc]')")
    raise DelegationFailed("peer_error", f"{peer} offers no A2A 1.0 JSON-RPC, HTTP+JSON or "
                                         f"gRPC interface, nor JSON-RPC 0.3{grpc}")


class A2APeerClient:
    def __init__(self, base_url: str, token: str, *, session: aiohttp.ClientSession,
                 name: str = "", connect_timeout: float = 3.0, timeout: float = 60.0,
                 max_response_bytes: int = 4 * 1024 * 1024, tls: ssl.SSLContext | None = None,
                 poll_seconds: float = 0.2, guard: OutboundGuard | None = None,
                 ca_file: Path | None = None, grpc: GrpcChannels | None = None) -> None:
        """``guard``: the session's guard, also judging the interface URLs the card names
        (as ``PeerClient``'s). ``ca_file``: the CA that ``tls`` trusts, for a gRPC channel
        (which cannot take an ``ssl.SSLContext``). ``grpc``: the channels kept across
        clients (else a gRPC call's channel closes with it)."""
        self.base_url = base_url.rstrip("/")
        self.name = name or self.base_url
        self._token = token
        self._session = session
        self._connect_timeout = connect_timeout
        self._timeout = timeout
        self._max = max_response_bytes
        self._tls: ssl.SSLContext | bool = tls if tls is not None else True
        self._poll = poll_seconds
        self._guard = guard
        self._ca_file = ca_file
        self._grpc = grpc

    def __repr__(self) -> str:
        return f"A2APeerClient({self.base_url!r})"

    def _mapped(self, timeout: float) -> contextlib.AbstractContextManager[None]:
        return transport_errors(self.name, timeout)

    def _left(self, deadline: float) -> float:
        left = min(deadline - time.monotonic(), self._timeout)
        if left <= 0:
            raise DelegationFailed("peer_timeout", f"{self.name} did not finish in time")
        return left

    @contextlib.asynccontextmanager
    async def _open(self, method: str, url: str, *, body: Any, headers: Mapping[str, str],
                    ) -> AsyncIterator[aiohttp.ClientResponse]:
        if self._guard is not None:
            self._guard.check_target(url)
        # No token, no header: ``butler card`` reads public cards without one.
        hdrs = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        hdrs.update(headers)
        data = None if body is None else exact_json.dumps_bytes(body)
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        async with self._session.request(
            method, url, data=data, headers=hdrs, allow_redirects=False, ssl=self._tls,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
        ) as resp:
            if 300 <= resp.status < 400:
                raise DelegationFailed("peer_error", f"{self.name} redirected (not followed)")
            yield resp

    async def _json(self, resp: aiohttp.ClientResponse) -> Any:
        raw = await resp.content.read(self._max + 1)
        if len(raw) > self._max:
            raise DelegationFailed("peer_error", f"{self.name} answer exceeds {self._max} bytes")
        try:
            return exact_json.loads(raw, max_depth=128)
        except ButlerError:
            raise bad_answer(self.name, f"HTTP {resp.status} without JSON") from None

    async def _call(self, method: str, url: str, body: Any, headers: Mapping[str, str],
                    deadline: float) -> tuple[int, Any]:
        left = self._left(deadline)
        with self._mapped(left):
            async with asyncio.timeout(left), self._open(method, url, body=body,
                                                         headers=headers) as resp:
                return resp.status, await self._json(resp)

    async def card(self, deadline: float) -> dict[str, Any]:
        """The agent card; agents older than A2A 0.3 serve it at ``agent.json`` only."""
        status = 0
        for path in (WELL_KNOWN_CARD_PATH, LEGACY_CARD_PATH):
            left = self._left(deadline)
            with self._mapped(left):
                async with asyncio.timeout(left), self._open(
                        "GET", self.base_url + path, body=None, headers={}) as resp:
                    status = resp.status
                    if status == 404:
                        continue
                    data = await self._json(resp)
            if status == 200 and isinstance(data, dict):
                return data
            break
        raise DelegationFailed("peer_error", f"{self.name} has no A2A agent card at "
                                             f"{WELL_KNOWN_CARD_PATH} or {LEGACY_CARD_PATH} "
                                             f"(HTTP {status})")

    # -- one operation, on each binding -----------------------------------------------

    def _rpc_body(self, iface: Interface, op: str, params: dict[str, Any]) -> dict[str, Any]:
        names = {"send": ("SendMessage", "message/send"),
                 "stream": ("SendStreamingMessage", "message/stream"),
                 "get": ("GetTask", "tasks/get")}[op]
        method = names[0] if iface.version == PROTOCOL_VERSION else names[1]
        return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}

    def _unwrap(self, iface: Interface, status: int, data: Any) -> Any:
        if iface.binding == "JSONRPC":
            if not isinstance(data, dict):
                raise bad_answer(self.name, "not a JSON-RPC response")
            if "error" in data:
                raise peer_error(self.name, data["error"])
            if status != 200 or "result" not in data:
                raise bad_answer(self.name, f"HTTP {status} without a JSON-RPC result")
            return data["result"]
        if status >= 400 or (isinstance(data, dict) and "error" in data and status != 200):
            raise peer_error(self.name, data.get("error") if isinstance(data, dict) else None)
        return data

    def _task_of(self, iface: Interface, result: Any) -> Task:
        if iface.version == PROTOCOL_VERSION:
            if isinstance(result, dict) and "message" in result:
                return message_task(result["message"], self.name)
            if isinstance(result, dict) and "task" in result:
                result = result["task"]
            return decode_task(result, iface.version, self.name)
        if isinstance(result, dict) and result.get("kind") == "message":
            return message_task(result, self.name)
        return decode_task(result, iface.version, self.name)

    async def _send(self, iface: Interface, params: dict[str, Any], headers: Mapping[str, str],
                    deadline: float) -> Task:
        if iface.binding == "JSONRPC":
            body = self._rpc_body(iface, "send", params)
            status, data = await self._call("POST", iface.url, body, headers, deadline)
        else:
            status, data = await self._call("POST", iface.url + "/message:send", params, headers,
                                            deadline)
        return self._task_of(iface, self._unwrap(iface, status, data))

    async def _get(self, iface: Interface, task_id: str, headers: Mapping[str, str],
                   deadline: float) -> Task:
        if iface.binding == "JSONRPC":
            status, data = await self._call("POST", iface.url, self._rpc_body(
                iface, "get", {"id": task_id}), headers, deadline)
        else:
            status, data = await self._call("GET", f"{iface.url}/tasks/{quote(task_id, safe='')}",
                                            None, headers, deadline)
        return self._task_of(iface, self._unwrap(iface, status, data))

    async def _stream(self, iface: Interface, params: dict[str, Any],
                      headers: Mapping[str, str], deadline: float) -> Task | None:
        url = iface.url if iface.binding == "JSONRPC" else iface.url + "/message:stream"
        body = self._rpc_body(iface, "stream", params) if iface.binding == "JSONRPC" else params
        left = max(deadline - time.monotonic(), 0.001)
        with self._mapped(left):
            async with asyncio.timeout(left), self._open(
                    "POST", url, body=body,
                    headers={**headers, "Accept": "text/event-stream"}) as resp:
                if resp.content_type != "text/event-stream":
                    return self._task_of(iface, self._unwrap(iface, resp.status,
                                                             await self._json(resp)))
                return await self._fold(iface, self._results(iface, resp))

    async def _results(self, iface: Interface,
                       resp: aiohttp.ClientResponse) -> AsyncIterator[Any]:
        async for name, data in self._events(resp):
            if name == "error" and iface.binding != "JSONRPC":
                raise peer_error(self.name, _dict(data).get("error"))
            yield self._unwrap(iface, 200, data)

    async def _fold(self, iface: Interface, results: AsyncIterator[Any]) -> Task | None:
        """A stream's results into the task, until it ends or waits on its caller; None
        when the stream does not begin with anything usable (the caller sends instead)."""
        task: Task | None = None
        async with contextlib.aclosing(results):  # type: ignore[type-var]
            async for result in results:
                try:
                    task = apply_event(task, result, iface.version, self.name)
                except DelegationFailed:
                    if task is not None:
                        raise
                    log.info("%s: a stream that does not begin with anything usable; "
                             "sending the message without streaming", self.name)
                    return None
                if interrupted_or_terminal(task.state):
                    break
        return task

    async def _events(self, resp: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
        name, lines, size = "message", [], 0
        async for raw_line in resp.content:
            size += len(raw_line)
            if size > self._max:
                raise DelegationFailed("peer_error", f"{self.name} event exceeds {self._max} "
                                                     "bytes")
            line = raw_line.decode("utf-8").rstrip("\r\n")
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                lines.append(line[5:].removeprefix(" "))
            elif not line and lines:
                try:
                    yield name, exact_json.loads("\n".join(lines), max_depth=128)
                except ButlerError:
                    raise bad_answer(self.name, "an event that is not JSON") from None
                name, lines, size = "message", [], 0

    # -- the whole delegation ---------------------------------------------------------

    async def run(self, request: TaskRequest, *, chain: tuple[str, ...],
                  budget: Decimal | None, headers: Mapping[str, str] | None = None,
                  deadline: float, card: dict[str, Any] | None = None) -> Task:
        """Send ``request``; the task once it ended or waits on its caller. ``card``: the
        peer's card as the caller already read (and checked) it, else it is read here."""
        if card is None:
            card = await self.card(deadline)
        iface = choose_interface(card, self.name)
        extra = dict(headers or {})
        hdrs = {VERSION_HEADER: iface.version, **swarm_extension.envelope_headers(chain, budget),
                **extra}
        params = self._params(request, iface, chain, budget, extra.get(TRACE_HEADER),
                              extra.get(TREE_HEADER))
        streaming = _dict(card.get("capabilities")).get("streaming") is True
        if iface.binding == "GRPC":
            return await self._run_grpc(iface, params, hdrs, streaming, deadline)
        task = None
        if streaming:
            task = await self._stream(iface, params, hdrs, deadline)
        if task is None:
            task = await self._send(iface, params, hdrs, deadline)
        return await self._settle(task, lambda task_id: self._get(iface, task_id, hdrs,
                                                                  deadline), deadline)

    async def _settle(self, task: Task, get: Callable[[str], Awaitable[Task]],
                      deadline: float) -> Task:
        """Poll until the task ends or waits on its caller."""
        while not interrupted_or_terminal(task.state):
            await asyncio.sleep(min(self._poll, self._left(deadline)))
            task = await get(task.id)
        return task

    async def _run_grpc(self, iface: Interface, params: dict[str, Any],
                        headers: Mapping[str, str], streaming: bool, deadline: float) -> Task:
        channels = GrpcChannels(size=1) if self._grpc is None else self._grpc
        try:
            with self._mapped(self._left(deadline)):
                async with channels.peer(
                        iface.url, self._token, peer_url=self.base_url, name=self.name,
                        guard=self._guard, ca_file=self._ca_file,
                        max_response_bytes=self._max,
                        connect_timeout=self._connect_timeout) as peer:
                    task = None
                    if streaming:
                        left = self._left(deadline)
                        async with asyncio.timeout(left):
                            task = await self._fold(iface, peer.stream(params, headers, left))
                    if task is None:
                        task = self._task_of(iface, await peer.send(params, headers,
                                                                     self._left(deadline)))

                    async def get(task_id: str) -> Task:
                        return self._task_of(iface, await peer.get(task_id, headers,
                                                                   self._left(deadline)))

                    return await self._settle(task, get, deadline)
        finally:
            if self._grpc is None:  # a one-off client: its channel goes with the call
                await channels.aclose()

    def _params(self, request: TaskRequest, iface: Interface, chain: tuple[str, ...],
                budget: Decimal | None, trace_id: str | None,
                tree_id: str | None) -> dict[str, Any]:
        parts: list[Part] = []
        if request.text:
            parts.append(Part(text=request.text))
        if request.input:
            parts.append(Part(data=dict(request.input)))
        parts.extend(request.parts)
        envelope = swarm_extension.encode_envelope(chain, budget, trace_id, tree_id)
        metadata = {swarm_extension.SWARM_EXTENSION_URI: envelope}
        message_id = uuid.uuid4().hex
        if iface.version == PROTOCOL_VERSION:
            message = {"messageId": message_id, "role": "ROLE_USER",
                       "parts": [a2a_v1.encode_part(p) for p in parts or [Part(text="")]],
                       "metadata": metadata}
            return {"message": message, "configuration": {"returnImmediately": False}}
        message = {"kind": "message", "messageId": message_id, "role": "user",
                   "parts": [a2a_v03.encode_part(p) for p in parts or [Part(text="")]],
                   "metadata": metadata}
        return {"message": message, "configuration": {"blocking": True}}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
