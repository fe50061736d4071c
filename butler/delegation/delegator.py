"""``a2a.delegate``: send work to a peer, bounded by budget, depth and deadline.

Transport failures move on to the next candidate (at most ``MAX_ATTEMPTS``); a peer's
refusal or rejection of the request is final and is never retried.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from decimal import Decimal
from itertools import islice
from pathlib import Path
from typing import Any

import aiohttp
from opentelemetry import trace
from opentelemetry.trace import NoOpTracer, Tracer
from opentelemetry.util.types import Attributes

from butler.delegation.peer_cancel import Followed, PeerCancels
from butler.delegation.peer_cards import PeerCards, from_card
from butler.delegation.peer_identity import PeerIdentities
from butler.delegation.peers import (
    Candidate,
    DelegationPlan,
    Discovery,
    PeerHealth,
    PeerStatus,
    eligible,
)
from butler.routing import RouteCandidate
from butler.skills.base import DelegationResult
from butler.telemetry.traces import inject_headers
from internal.http import OutboundGuard, OutboundRules, ResolverFactory, outbound_session
from internal.protocol.a2a.client import (
    A2AClient,
    GrpcChannels,
    PeerTracking,
    PeerUpdate,
    V2Transport,
)
from internal.protocol.a2a.codec import swarm_envelope
from internal.protocol.a2a.model import (
    Budget,
    ButlerError,
    CostNode,
    DelegationFailed,
    PeerTask,
    Refusal,
    Task,
    TaskRequest,
    TaskState,
    agent_key,
)

_ZERO = Decimal("0")
log = logging.getLogger("butler.delegation")
MAX_ATTEMPTS = 3
# The registry's agents and their cards' skills the intent router ranks, at most.
ROUTED_REGISTRY_CANDIDATES = 2000
MAX_CLIENTS = 1024
POLL_SECONDS = 0.2


class PeerDelegator:
    def __init__(self, *, agent_id: str, static: Sequence[Candidate], tracer: Tracer,
                 audit: Callable[..., None], max_concurrency: int,
                 discover: Discovery | None = None, names: ResolverFactory | None = None,
                 identities: PeerIdentities | None = None) -> None:
        """``names``: the resolver peers' host names go through (tests map names with it)."""
        self.agent_id = agent_id
        self.static = list(static)
        self.identities = identities  # key continuity: None checks no peer's key
        self.discover = discover
        self.health = PeerHealth()
        self._tracer = tracer
        # The no-op tracer only carries the trace on: span attributes would be dropped.
        self._recording = not isinstance(tracer, NoOpTracer)
        self._audit = audit
        self._slots = asyncio.Semaphore(max_concurrency)
        self._max_concurrency = max_concurrency
        self._names = names
        # One guarded session per set of rules: a candidate's source decides its rules.
        self._sessions: dict[OutboundRules, tuple[OutboundGuard, aiohttp.ClientSession]] = {}
        self._tls: dict[Path, ssl.SSLContext] = {}
        self._grpc = GrpcChannels()  # a channel per gRPC peer, kept as the sessions are
        self._cards = PeerCards(self.static, self._read_card)
        # (the static peers' routes, (the registry's agents, what its search found), all
        # as one tuple): rebuilt only when one of the first is a new tuple, so the
        # router's index stays cached.
        self._routes: tuple[tuple[RouteCandidate, ...], tuple[Any, Any],
                            tuple[RouteCandidate, ...]] = ((), ((), ()), ())
        # A client per peer, reused call after call: it holds nothing of any one call.
        self._clients: dict[Candidate, A2AClient] = {}
        # Peers' tasks that delegations stopped following, being canceled (peer_cancel.py).
        self.cancels = PeerCancels(audit)
        # Peers' tasks waiting on their caller while it is asked (a conversation), by task
        # id: what their cancel needs, should no answer come (``abandon``).
        self._asking: dict[str, tuple[A2AClient, float, dict[str, Any]]] = {}

    def set_peers(self, static: Sequence[Candidate]) -> None:
        """The configured peers anew (a reload, ``butler/reload.py``): calls under way keep
        the peer they have; the new peers' cards are read when the router next asks."""
        self.static = list(static)
        self._cards = PeerCards(self.static, self._read_card)

    def _http(self, rules: OutboundRules) -> tuple[OutboundGuard, aiohttp.ClientSession]:
        if rules not in self._sessions:
            guard = OutboundGuard(rules, names=self._names)
            # A call holds one connection at a time, inside a slot, and while it opens one
            # it may read the peer's card on another (key continuity): twice the slots.
            self._sessions[rules] = (guard, outbound_session(
                guard, limit=2 * self._max_concurrency,
                connection_checks=self.identities is not None))
        return self._sessions[rules]

    def _pinned(self, ca_file: Path | None) -> ssl.SSLContext | None:
        """A context that trusts only the peer's pinned CA (built once per file)."""
        if ca_file is None:
            return None
        if ca_file not in self._tls:
            self._tls[ca_file] = ssl.create_default_context(cafile=str(ca_file))
        return self._tls[ca_file]

    async def aclose(self) -> None:
        await self.cancels.aclose()  # the cancels of the tasks a stop ended go out first
        await self._grpc.aclose()
        for _, session in self._sessions.values():
            await session.close()

    async def plan(self, capabilities: Sequence[str], chain: Sequence[str],
                   peer: str | None = None, skill: str | None = None) -> DelegationPlan:
        """The one choice of where a delegation goes: the peers from the config and the
        registry that provide ``capabilities`` (or the one named ``peer``), none in
        ``chain`` or this agent, healthiest and cheapest first."""
        pool = list(self.static)
        if self.discover is not None and capabilities and peer is None:
            try:
                pool += await self.discover(capabilities)
            except Exception as exc:
                # Static peers still serve; the operator must see that the registry did not.
                log.warning("registry lookup for %s failed, using configured peers only: %s",
                            ",".join(capabilities), exc)
        elif peer is not None and not any(peer in (c.name, c.url) for c in pool):
            # A peer by name that the config does not know (one the intent router chose
            # among the registry's agents): the registry's, by the same trust rules.
            pool += [c for c, _ in await self._registry_agents()]
            if self.discover is not None:
                pool += [c for c, _ in self.discover.searched()]
        found = eligible(pool, capabilities, (*chain, self.agent_id), peer)
        return DelegationPlan(tuple(sorted(found, key=self.health.rank_key)),
                              tuple(capabilities), peer, skill)

    async def route_candidates(self, text: str = "") -> tuple[RouteCandidate, ...]:
        """The configured peers and their cards' skills, then the registry's agents (that
        are not configured peers) and theirs, then the agents the registry's search
        found for ``text`` (a task in plain words) and lately, for the intent router."""
        static = await self._cards.candidates()
        agents = await self._registry_agents()
        searched = await self.discover.search(text) if self.discover is not None and text \
            else self.discover.searched() if self.discover is not None else ()
        if static is not self._routes[0] or agents is not self._routes[1][0] \
                or searched is not self._routes[1][1]:
            configured = {agent_key(c.name) for c in self.static}
            found = islice((r for cand, card in agents if agent_key(cand.name) not in configured
                            for r in from_card(cand, card)), ROUTED_REGISTRY_CANDIDATES)
            listed = configured | {agent_key(cand.name) for cand, _ in agents}
            routes = (*static, *found,
                      *(r for cand, r in searched if agent_key(cand.name) not in listed))
            # A listing that differs only in what the router does not read (a card's
            # timestamp) keeps the tuple, and so the router's index.
            self._routes = (static, (agents, searched),
                            self._routes[2] if routes == self._routes[2] else routes)
        return self._routes[2]

    async def peer_status(self) -> list[PeerStatus]:
        """The configured peers, then the registry's agents a token may go to (the cached
        listing the intent router reads), each with its health."""
        configured = {agent_key(c.name) for c in self.static}
        found = [c for c, _ in await self._registry_agents()
                 if agent_key(c.name) not in configured]
        return [self.health.status(c) for c in (*self.static, *found)]

    async def _registry_agents(self) -> tuple[tuple[Candidate, dict[str, Any]], ...]:
        if self.discover is None:
            return ()
        try:
            return await self.discover.routable()
        except Exception as exc:
            log.warning("registry listing failed, routing among configured peers only: %s",
                        exc)
            return ()

    async def _read_card(self, cand: Candidate) -> dict[str, Any]:
        """The card the intent router reads, with the peer's token: after the key check."""
        async def read(_: dict[str, Any] | None) -> dict[str, Any]:
            return await self._client(cand).card(deadline)

        deadline = time.monotonic() + cand.timeout
        if self.identities is None:
            return await read(None)
        return await self.identities.guarded(
            cand, lambda: self._public_card(cand, deadline), read)

    async def _public_card(self, cand: Candidate, deadline: float) -> dict[str, Any]:
        """The peer's A2A card, read without its token: whether the token may go there
        is what the card is read to decide."""
        guard, session = self._http(cand.rules)
        return await A2AClient(
            cand.url, "", session=session, name=cand.name,
            connect_timeout=cand.connect_timeout, timeout=cand.timeout,
            max_response_bytes=cand.max_response_bytes, tls=self._pinned(cand.ca_file),
            guard=guard).card(min(deadline, time.monotonic() + cand.timeout))

    async def _public_log(self, cand: Candidate, old: int, new: int,
                          deadline: float) -> Any:
        """The peer's proof that its receipt log at ``new`` extends it at ``old``: public,
        read without its token (``peer_logs``)."""
        guard, session = self._http(cand.rules)
        return await V2Transport(
            cand.url, "", session=session, name=cand.name,
            connect_timeout=cand.connect_timeout, timeout=cand.timeout,
            max_response_bytes=cand.max_response_bytes, tls=self._pinned(cand.ca_file),
            guard=guard).request("GET", f"/v2/log/consistency?from={old}&to={new}",
                                 timeout=max(0.0, min(deadline - time.monotonic(),
                                                      cand.timeout)))

    async def delegate(self, *, plan: DelegationPlan, request: TaskRequest,
                       chain: tuple[str, ...], budget: Decimal, deadline: float,
                       parent_task_id: str = "", tree_id: str = "",
                       tracking: PeerTracking | None = None) -> DelegationResult:
        """Send ``request`` to ``plan``'s targets in turn. ``parent_task_id``: the local
        task this delegation works for (audit records); ``tree_id``: its delegation tree,
        sent on so the peer keys its workspace by it. ``tracking``: the peer's task followed
        as it goes (a delegation that relays its peer's progress and survives a restart)."""
        if not plan.targets:
            wanted = plan.peer or ", ".join(plan.capabilities) or "this task"
            raise DelegationFailed("no_capable_peer", f"no peer available for {wanted}")
        affordable = [c for c in plan.targets if c.cost_usd <= _grant(c, budget)]
        if not affordable:
            raise Refusal("budget_exhausted",
                          f"the cheapest peer costs {plan.targets[0].cost_usd} USD, "
                          f"{budget} USD is left")
        last: DelegationFailed | None = None
        for cand in affordable[:MAX_ATTEMPTS]:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                return await self._send(cand, request, chain, _grant(cand, budget), deadline,
                                        parent_task_id, tree_id, tracking=tracking)
            except DelegationFailed as err:
                if err.code == "no_capable_peer":
                    raise
                last = err
                log.warning("delegation to %s failed (%s); trying the next peer", cand.name,
                            err.code)
        if last is not None:
            raise last
        raise DelegationFailed("peer_timeout", "no time left to delegate")

    def _client(self, cand: Candidate) -> A2AClient:
        """The peer's client, its every new connection checked for the peer's key first."""
        client = self._clients.get(cand)
        if client is None:
            if len(self._clients) >= MAX_CLIENTS:  # registry peers come and go
                self._clients.clear()
            guard, session = self._http(cand.rules)
            check = None if self.identities is None else self.identities.connection_check(
                cand, lambda: self._public_card(cand, time.monotonic() + cand.timeout))
            client = A2AClient(cand.url, cand.token, session=session, protocol=cand.protocol,
                               name=cand.name, connect_timeout=cand.connect_timeout,
                               timeout=cand.timeout, max_response_bytes=cand.max_response_bytes,
                               tls=self._pinned(cand.ca_file), poll_seconds=POLL_SECONDS,
                               guard=guard, ca_file=cand.ca_file, grpc=self._grpc, check=check)
            self._clients[cand] = client
        return client

    async def _send(self, cand: Candidate, request: TaskRequest, chain: tuple[str, ...],
                    grant: Decimal, deadline: float, parent_task_id: str,
                    tree_id: str, *, peer_task: PeerTask | None = None,
                    tracking: PeerTracking | None = None, reattach: bool = False
                    ) -> DelegationResult:
        """One exchange with ``cand``: a new task, a follow-up answer to ``peer_task``,
        or (``reattach``) reading ``peer_task`` until it ends or waits again."""
        client = self._client(cand)
        if peer_task is not None:  # its caller answers: it is followed again, here
            self._asking.pop(peer_task.task_id, None)
        where: list[PeerTask] = []  # the peer's task, once it is known
        followed = Followed()  # for a cancel sent to it (``peer_cancel``)

        async def seen(update: PeerUpdate) -> None:
            where[:] = [update.ref]
            followed.seen(update)
            if tracking is not None:
                await tracking.watch(update)

        started = time.monotonic()
        audit: dict[str, Any] = {"caller": self.agent_id,
                                 "task_id": parent_task_id or request.id, "chain": chain,
                                 "detail": {"peer": cand.name, "url": cand.url,
                                            "source": cand.source}}
        attributes: Attributes = {
            "butler.peer": cand.name, "butler.caller_chain": list(chain),
            "butler.depth": len(chain), "butler.budget_usd": str(grant),
        } if self._recording else None
        with self._tracer.start_as_current_span("butler.delegate",
                                                attributes=attributes) as span:
            headers: dict[str, str] = {}
            inject_headers(headers)
            trace_id = format(span.get_span_context().trace_id, "032x")
            headers[swarm_envelope.TRACE_HEADER] = trace_id
            if tree_id:
                headers[swarm_envelope.TREE_HEADER] = tree_id
            self._audit("delegation_sent", **audit, budget_before=grant, budget_after=None,
                        decision=cand.name, trace_id=trace_id)
            async with self._slots:
                async def call(card: dict[str, Any] | None) -> Task:
                    with self.cancels.following(client, followed, seconds=cand.timeout,
                                                record={**audit, "trace_id": trace_id}):
                        if reattach and peer_task is not None:
                            task = await client.follow(peer_task, deadline=deadline,
                                                       watch=seen)
                        else:
                            task = await client.run(request, chain=chain, budget=grant,
                                                    headers=headers, deadline=deadline,
                                                    card=card, peer_task=peer_task,
                                                    watch=seen, tracking=tracking)
                    if cand.protocol != "a2a":
                        return task
                    # A standard A2A agent reports no spend: a completed task is charged
                    # the ``cost_usd`` its peer entry says it costs.
                    spent = cand.cost_usd if task.state is TaskState.COMPLETED else _ZERO
                    return replace(task, budget=Budget(grant, min(spent, grant)))

                try:
                    if self.identities is None:
                        task = await call(None)
                    else:
                        def read_card() -> Awaitable[dict[str, Any]]:
                            return self._public_card(cand, deadline)

                        def read_log(old: int, new: int) -> Awaitable[Any]:
                            return self._public_log(cand, old, new, deadline)

                        task = await self.identities.guarded(cand, read_card, call)
                        await self.identities.answered(cand, task.receipts, read_card,
                                                       read_log)
                except ButlerError as err:
                    span.set_attribute("butler.refusal", err.code)
                    if isinstance(err, DelegationFailed):
                        self.health.failed(cand.name)
                    took = f"{time.monotonic() - started:.6f}"
                    self._audit("delegation_result", **{**audit, "detail": {
                                    **audit["detail"], "seconds": took}},
                                budget_before=grant, budget_after=grant, decision="error",
                                code=err.code, trace_id=trace_id)
                    raise
            elapsed = time.monotonic() - started
            self.health.ok(cand.name, elapsed)
            spent = min(task.budget.spent_usd if task.budget else Decimal("0"), grant)
            audit["detail"] = {**audit["detail"], "peer_task_id": task.id,
                               "seconds": f"{elapsed:.6f}"}
            self._audit("delegation_result", **audit, budget_before=grant,
                        budget_after=grant - spent, decision=task.state.value,
                        code=task.error.code if task.error else None, trace_id=trace_id)
            span.set_attribute("butler.state", task.state.value)
            asking = where[0] if where else peer_task
            if task.state.interrupted and asking is not None:
                self._asking[asking.task_id] = (client, cand.timeout,
                                                {**audit, "trace_id": trace_id})
        cost = task.cost or CostNode(agent=cand.name, skill=task.skill, cost_usd=spent,
                                     duration_ms=int(elapsed * 1000), status=task.state.value)
        return DelegationResult(
            peer=cand.name, task_id=task.id, state=task.state.value, parts=task.parts,
            artifacts=task.artifacts, spent_usd=spent, cost=cost,
            error_code=task.error.code if task.error else "",
            error_message=task.error.message if task.error else "",
            receipts=task.receipts, peer_task=where[0] if where else peer_task,
            status_message=task.status_message,
            asked_by=task.asked_by or (cand.name if task.state.interrupted else ""),
        )

    # -- a conversation's later turns (issue 34): the same exchange, to a known task ----

    async def resume(self, *, peer_task: PeerTask, request: TaskRequest,
                     chain: tuple[str, ...], budget: Decimal, deadline: float,
                     parent_task_id: str = "", tracking: PeerTracking | None = None,
                     reattach: bool = False) -> DelegationResult:
        """Send ``request`` (the caller's answer) to ``peer_task``, waiting on its caller;
        or (``reattach``) follow ``peer_task`` after a restart. Checked as the first turn
        was: the peer must still be one (not in ``chain``), and affordable."""
        if agent_key(peer_task.peer) in {agent_key(a) for a in (*chain, self.agent_id)}:
            raise Refusal("loop_detected", f"{peer_task.peer} is already in the caller chain")
        plan = await self.plan((), chain, peer=peer_task.peer)
        if not plan.targets:
            raise DelegationFailed("no_capable_peer",
                                   f"{peer_task.peer} is no longer a peer of this agent")
        cand = plan.targets[0]
        if cand.cost_usd > _grant(cand, budget):
            raise Refusal("budget_exhausted", f"{cand.name} costs {cand.cost_usd} USD, "
                                              f"{budget} USD is left")
        return await self._send(cand, request, chain, _grant(cand, budget), deadline,
                                parent_task_id, peer_task.tree_id, peer_task=peer_task,
                                tracking=tracking, reattach=reattach)


    def abandon(self, peer_task: PeerTask) -> None:
        """``peer_task`` waits on its caller, and no answer will come (the delegating task
        was canceled, ran out of time, or its caller did not answer in time): the peer is
        sent its cancel in the background, as for a task that stopped being followed."""
        asking = self._asking.pop(peer_task.task_id, None)
        if asking is not None:
            client, seconds, record = asking
            self.cancels.send(client, peer_task, seconds=seconds, record=record)


def _grant(cand: Candidate, budget: Decimal) -> Decimal:
    return budget if cand.spend_cap_usd is None else min(budget, cand.spend_cap_usd)


def current_trace_id() -> str:
    return format(trace.get_current_span().get_span_context().trace_id, "032x")
