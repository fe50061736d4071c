"""The one outbound client (``a2a.delegate``), over one transport per binding.

A Butler peer is sent the task over its /v2 binding (``V2Transport``). For a standard A2A
agent the client reads its card and picks its A2A 1.0 JSON-RPC, HTTP+JSON or gRPC
interface (``JsonRpcTransport``, ``HttpJsonTransport``, ``GrpcTransport`` with the
``grpc`` extra; JSON-RPC 0.3 when that is all the card offers). On every binding the
task goes with the swarm envelope and is followed the same way until it ends or waits on
its caller: over a stream when the agent offers one, else by polling. Transport problems
become ``DelegationFailed`` (the delegator tries another peer); a Butler's refusal keeps
its class (never retried).

The peer's task (``PeerTask``: where it runs, its id and context) is told to the caller's
``watch`` as soon as the peer names it, so a caller that stops following it can cancel it
(``cancel``) on the binding it runs on: a Butler is sent the task under an id the client
chose, known before anything is sent.
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
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import aiohttp

from internal.http import ConnectionCheck, OutboundGuard
from internal.protocol.a2a.client._exchange import MAX_RESPONSE_BYTES
from internal.protocol.a2a.client._grpc_channels import GrpcChannels
from internal.protocol.a2a.client._http_bindings import (
    HttpJsonTransport,
    HttpRequests,
    JsonRpcTransport,
)
from internal.protocol.a2a.client._message import (
    Outgoing,
    PeerTracking,
    PeerUpdate,
    PeerWatch,
)
from internal.protocol.a2a.client._v2 import V2Transport
from internal.protocol.a2a.codec import swarm_envelope
from internal.protocol.a2a.codec.peer_answers import apply_event, artifact_update
from internal.protocol.a2a.model import (
    LEGACY_CARD_PATH,
    LEGACY_VERSION,
    PROTOCOL_VERSION,
    WELL_KNOWN_CARD_PATH,
    ButlerError,
    DelegationFailed,
    PeerTask,
    Task,
    TaskRequest,
    TaskState,
    interrupted_or_terminal,
    version_matches,
)

log = logging.getLogger("butler.delegation")
BUTLER_V2 = "BUTLER"  # an ``Interface.binding``: a Butler's own /v2 binding
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


class Transport(Protocol):
    """One binding's way to send a task and read it back (``StreamingTransport``: and to
    stream it). ``deadline``: the monotonic time the call must be done by."""

    name: str

    async def send(self, message: Outgoing, deadline: float) -> Task: ...

    async def task(self, task_id: str, message: Outgoing, deadline: float) -> Task: ...

    async def cancel(self, task_id: str, message: Outgoing, deadline: float) -> Task: ...


@runtime_checkable
class StreamingTransport(Transport, Protocol):
    version: str

    def stream(self, message: Outgoing, deadline: float) -> AsyncIterator[Any]:
        """The stream's results (or the whole ``Task`` when the agent did not stream)."""
        ...


class A2AClient:
    def __init__(self, base_url: str, token: str, *, session: aiohttp.ClientSession,
                 protocol: str = "a2a", name: str = "", connect_timeout: float = 3.0,
                 timeout: float = 60.0, max_response_bytes: int = MAX_RESPONSE_BYTES,
                 tls: ssl.SSLContext | None = None, poll_seconds: float = 0.2,
                 guard: OutboundGuard | None = None, ca_file: Path | None = None,
                 grpc: GrpcChannels | None = None, check: ConnectionCheck | None = None,
                 ) -> None:
        """``protocol``: ``butler`` (its /v2 binding) or ``a2a`` (the binding its card
        offers). ``guard``: the session's guard, also judging the interface URLs a card
        names. ``ca_file``: the CA that ``tls`` trusts, for a gRPC channel (which cannot
        take an ``ssl.SSLContext``). ``grpc``: the channels kept across clients (else a
        gRPC call's channel closes with it). ``check``: awaited before each new connection
        a request with the token opens (the session's ``connection_checks``)."""
        self.base_url = base_url.rstrip("/")
        self.name = name or self.base_url
        self.protocol = protocol
        self._token = token
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._max = max_response_bytes
        self._poll = poll_seconds
        self._guard = guard
        self._ca_file = ca_file
        self._grpc = grpc
        self._check = check
        self._http = HttpRequests(token, session=session, name=self.name,
                                  connect_timeout=connect_timeout, timeout=timeout,
                                  max_response_bytes=max_response_bytes, tls=tls,
                                  guard=guard, check=check)
        self._v2 = V2Transport(self.base_url, token, session=session, name=self.name,
                               connect_timeout=connect_timeout, timeout=timeout,
                               max_response_bytes=max_response_bytes, tls=tls, guard=guard,
                               check=check) if protocol == "butler" else None

    def __repr__(self) -> str:
        return f"A2AClient({self.base_url!r}, protocol={self.protocol!r})"

    async def card(self, deadline: float) -> dict[str, Any]:
        """The agent card: a Butler's /v2 card; an A2A agent's well-known card (agents
        older than A2A 0.3 serve it at ``agent.json`` only)."""
        if self._v2 is not None:
            return await self._v2.card()
        status = 0
        for path in (WELL_KNOWN_CARD_PATH, LEGACY_CARD_PATH):
            left = self._http.left(deadline)
            with self._http.mapped(left):
                async with asyncio.timeout(left), self._http.open(
                        "GET", self.base_url + path, body=None, headers={}) as resp:
                    status = resp.status
                    if status == 404:
                        continue
                    data = await self._http.json(resp)
            if status == 200 and isinstance(data, dict):
                return data
            break
        raise DelegationFailed("peer_error", f"{self.name} has no A2A agent card at "
                                             f"{WELL_KNOWN_CARD_PATH} or {LEGACY_CARD_PATH} "
                                             f"(HTTP {status})")

    async def run(self, request: TaskRequest, *, chain: tuple[str, ...],
                  budget: Decimal | None, headers: Mapping[str, str] | None = None,
                  deadline: float, card: dict[str, Any] | None = None,
                  peer_task: PeerTask | None = None, watch: PeerWatch | None = None,
                  tracking: PeerTracking | None = None) -> Task:
        """Send ``request``; the task once it ended or waits on its caller. ``card``: the
        peer's A2A card as the caller already read (and checked) it, else it is read here
        (a Butler's /v2 binding needs none). ``peer_task``: the peer's task waiting on its
        caller that ``request`` answers (sent to it, on the binding it was sent on).
        ``watch``: told of the peer's task once its id is known, then of each change seen.
        ``tracking``: follow the peer's task as it goes (a delegation that relays its
        peer's progress and survives a restart of this agent): known before it is sent
        where the binding allows (on /v2, sent with an id of ours); its changes read from
        the peer's stream, or, while someone follows the delegating task, from a Butler's
        events or (an agent that does not stream) every poll."""
        headers = dict(headers or {})
        if peer_task is not None:
            message = Outgoing(request, chain, budget, headers, peer_task.task_id,
                               peer_task.context_id)
            iface = self._interface_of(peer_task)
            streaming = card is not None and _streams(card)
            return await self._on_interface(iface, deadline, (
                lambda transport: self._follow(transport, iface, message, deadline,
                                               streaming=streaming, watch=watch,
                                               tracking=tracking)))
        if self._v2 is not None and not request.id:
            # A Butler keeps the caller's id: the task is known before it is sent.
            request = replace(request, id=uuid.uuid4().hex)
        message = Outgoing(request, chain, budget, headers)
        if self._v2 is not None:
            if watch is not None:
                pending = _pending_of(message)
                await watch(PeerUpdate(self._ref(_BUTLER, pending, message), pending,
                                       reported=False))
            return await self._follow(self._v2, _BUTLER, message, deadline,
                                      streaming=False, watch=watch, tracking=tracking)
        if card is None:
            card = await self.card(deadline)
        iface = choose_interface(card, self.name)
        return await self._on_interface(iface, deadline, (
            lambda transport: self._follow(transport, iface, message, deadline,
                                           streaming=_streams(card), watch=watch,
                                           tracking=tracking)))

    async def follow(self, peer_task: PeerTask, *, deadline: float,
                     watch: PeerWatch | None = None) -> Task:
        """The peer's task, read (``GetTask``) every ``poll_seconds`` until it ends or
        waits on its caller: a delegation re-attached after a restart. A peer that does
        not know the task any more: ``DelegationFailed("peer_task_lost")``."""
        message = _about(peer_task)

        async def poll(transport: Transport) -> Task:
            while True:
                try:
                    task = await transport.task(peer_task.task_id, message,
                                                self._call_deadline(deadline))
                    break
                except DelegationFailed as err:
                    if err.code not in TRANSIENT:
                        raise _lost(peer_task, err) from None
                    # Not reachable yet (it may be restarting too): until the deadline.
                    log.info("%s: re-attaching to task %s: %s", self.name,
                             peer_task.task_id, err.message)
                    await asyncio.sleep(min(self._poll, self._http.left(deadline)))
                except ButlerError as err:
                    raise _lost(peer_task, err) from None
            return await self._poll_task(transport, task, message, deadline, peer_task, watch)

        return await self._on_interface(self._interface_of(peer_task), deadline, poll)

    async def cancel(self, peer_task: PeerTask, deadline: float) -> Task:
        """Cancel the peer's task on the binding it runs on (/v2's cancel, ``CancelTask``,
        ``tasks/cancel``, ``:cancel`` or gRPC ``CancelTask``): the task as the peer
        answers."""
        message = _about(peer_task)
        return await self._on_interface(self._interface_of(peer_task), deadline, (
            lambda transport: transport.cancel(peer_task.task_id, message,
                                               self._call_deadline(deadline))))

    def _interface_of(self, peer_task: PeerTask) -> Interface:
        if peer_task.binding == "butler":
            if self._v2 is None:
                raise DelegationFailed("peer_error", f"{self.name} is no longer a Butler peer")
            return _BUTLER
        if self._v2 is not None:
            raise DelegationFailed("peer_error", f"{self.name} is now a Butler peer, its "
                                                 f"task was sent over {peer_task.binding}")
        return Interface(peer_task.binding, peer_task.version, peer_task.url)

    async def _on_interface(self, iface: Interface, deadline: float,
                            use: Callable[[Transport], Awaitable[Task]]) -> Task:
        """``use`` with the transport of ``iface``: the /v2 binding, JSON-RPC or HTTP+JSON
        over the session, or gRPC over the peer's channel."""
        if iface.binding == "butler":
            assert self._v2 is not None
            return await use(self._v2)
        if iface.binding != "GRPC":
            return await use((JsonRpcTransport if iface.binding == "JSONRPC"
                              else HttpJsonTransport)(iface.url, iface.version, self._http))
        channels = GrpcChannels(size=1) if self._grpc is None else self._grpc
        try:
            with self._http.mapped(self._http.left(deadline)):
                async with channels.peer(
                        iface.url, self._token, peer_url=self.base_url, name=self.name,
                        guard=self._guard, ca_file=self._ca_file,
                        max_response_bytes=self._max, connect_timeout=self._connect_timeout,
                        check=self._check) as grpc_transport:
                    return await use(grpc_transport)
        finally:
            if self._grpc is None:  # a one-off client: its channel goes with the call
                await channels.aclose()

    def _call_deadline(self, deadline: float) -> float:
        """One request's deadline: the call's, within the client's timeout."""
        return time.monotonic() + self._http.left(deadline)

    async def _follow(self, transport: Transport, iface: Interface, message: Outgoing,
                      deadline: float, *, streaming: bool, watch: PeerWatch | None = None,
                      tracking: PeerTracking | None = None) -> Task:
        """Stream when the agent offers it, else (or when the stream is of no use) send;
        then poll until the task ends or waits on its caller. ``tracking``, for a send:
        a Butler's events are read meanwhile once someone follows; another agent is asked
        to answer at once and polled when someone follows already."""
        task = None
        if streaming and isinstance(transport, StreamingTransport):
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                task = await self._fold(transport, iface, message,
                                        transport.stream(message, deadline), watch)
        if task is None and tracking is not None and isinstance(transport, V2Transport):
            task = await self._send_relaying(transport, message, deadline, tracking)
        elif task is None:
            if tracking is not None and tracking.followed():  # its progress read every poll
                message = replace(message, return_immediately=True)
            task = await transport.send(message, self._call_deadline(deadline))
        return await self._poll_task(transport, task, message, deadline,
                                     self._ref(iface, task, message), watch)

    async def _poll_task(self, transport: Transport, task: Task, message: Outgoing,
                    deadline: float, ref: PeerTask, watch: PeerWatch | None) -> Task:
        """Read the task every ``poll_seconds`` until it ends or waits on its caller;
        ``watch`` is told of each state or status message it had not seen."""
        seen: tuple[TaskState, str] | None = None
        pause = self._poll / 8  # sooner at first: most tasks are quick
        while True:
            if watch is not None and (task.state, task.status_message) != seen:
                seen = (task.state, task.status_message)
                await watch(PeerUpdate(ref, task))
            if interrupted_or_terminal(task.state):
                return task
            await asyncio.sleep(min(pause, self._http.left(deadline)))
            pause = min(pause * 2, self._poll)
            task = await transport.task(task.id, message, self._call_deadline(deadline))

    async def _send_relaying(self, transport: V2Transport, message: Outgoing,
                             deadline: float, tracking: PeerTracking) -> Task:
        """A Butler's answer, waited for in one request; meanwhile, once someone follows
        the delegating task, the peer task's events, each told to ``tracking.watch``."""
        relaying = asyncio.Event()
        relay = asyncio.create_task(self._relay_events(transport, message, tracking,
                                                       relaying))
        try:
            task = await transport.send(message, self._call_deadline(deadline))
            if relaying.is_set():
                # The answer may come before the events that led to it: those are relayed
                # first (the stream ends with the task's last state), for a moment at most.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(relay), RELAY_DRAIN_SECONDS)
            return task
        finally:
            relay.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relay

    async def _relay_events(self, transport: V2Transport, message: Outgoing,
                            tracking: PeerTracking, relaying: asyncio.Event) -> None:
        """The peer task's events (a status, an artifact chunk) as they come, until it
        ends or waits on its caller; what cannot be read is not relayed, and costs the
        delegation nothing."""
        await tracking.until_followed()
        relaying.set()
        task = _pending_of(message)
        ref = self._ref(_BUTLER, task, message)
        seen: tuple[TaskState, str] | None = None
        while True:
            try:
                async for kind, data in transport.events(task.id):
                    if kind == "artifact":
                        chunk = PeerUpdate(ref, task, *transport.artifact_event(data))
                        await tracking.watch(chunk)
                        continue
                    task = transport.decode(data)
                    if (task.state, task.status_message) != seen:
                        seen = (task.state, task.status_message)
                        await tracking.watch(PeerUpdate(ref, task))
                    if interrupted_or_terminal(task.state):
                        return
                return
            except ButlerError as err:  # not there yet (the send is on its way): again
                log.debug("%s: events of task %s: %s", self.name, task.id, err.message)
                await asyncio.sleep(self._poll)
            except Exception:
                log.warning("%s: relaying the progress of task %s stopped", self.name,
                            task.id, exc_info=True)
                return

    def _ref(self, iface: Interface, task: Task, message: Outgoing) -> PeerTask:
        """Where the peer's task is, as a delegation keeps it."""
        return PeerTask(self.name, task.id or message.task_id,
                        task.context_id or message.context_id, iface.binding, iface.version,
                        iface.url or self.base_url,
                        message.headers.get(swarm_envelope.TREE_HEADER, ""))

    async def _fold(self, transport: StreamingTransport, iface: Interface,
                    message: Outgoing, results: AsyncIterator[Any],
                    watch: PeerWatch | None = None) -> Task | None:
        """A stream's results into the task, until it ends or waits on its caller; None
        when the stream does not begin with anything usable (the caller sends instead).
        ``watch`` is told of each event as it comes."""
        task: Task | None = None
        async with contextlib.aclosing(results):  # type: ignore[type-var]
            async for result in results:
                if isinstance(result, Task):  # the agent answered without a stream
                    return result
                first = task is None
                try:
                    task = apply_event(task, result, transport.version, self.name)
                except DelegationFailed:
                    if task is not None:
                        raise
                    log.info("%s: a stream that does not begin with anything usable; "
                             "sending the message without streaming", self.name)
                    return None
                if first and message.task_id and task.state.interrupted:
                    # An answer's stream may begin with the task as it was before the
                    # answer (the @a2a-js/sdk server begins every turn with the task):
                    # that question is the one answered, not this turn's outcome, which
                    # the events after it tell (or the task as it is when the stream ends).
                    continue
                if watch is not None:
                    chunk = artifact_update(result, transport.version)
                    ref = self._ref(iface, task, message)
                    await watch(PeerUpdate(ref, task, *chunk) if chunk is not None
                                else PeerUpdate(ref, task))
                if interrupted_or_terminal(task.state):
                    break
        return task


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _streams(card: Mapping[str, Any]) -> bool:
    return _dict(card.get("capabilities")).get("streaming") is True


# The /v2 binding, as a delegation's peer task records it.
_BUTLER = Interface("butler", "", "")

# How long a delegation's answer waits for the events before it to be relayed.
RELAY_DRAIN_SECONDS = 1.0

# A peer that cannot be reached (or not in time) may still know the task.
TRANSIENT = frozenset({"peer_unreachable", "peer_timeout"})


def _lost(peer_task: PeerTask, err: ButlerError) -> DelegationFailed:
    return DelegationFailed("peer_task_lost", f"{peer_task.peer} no longer knows task "
                                              f"{peer_task.task_id}: {err.message}")


def _about(peer_task: PeerTask) -> Outgoing:
    """A request about the peer's task (read it, cancel it): with its delegation tree."""
    return Outgoing(TaskRequest(), headers={
        swarm_envelope.TREE_HEADER: peer_task.tree_id} if peer_task.tree_id else {})


def _pending_of(message: Outgoing) -> Task:
    """The task ``message`` is sent to, as known before it is sent: its id is ours (a new
    /v2 task) or the peer's (a follow-up)."""
    return Task(id=message.task_id or message.request.id or "",
                context_id=message.context_id or message.request.context_id or "", owner="",
                state=TaskState.SUBMITTED, request=TaskRequest(), created_at="",
                updated_at="")

