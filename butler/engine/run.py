"""One running task: its skill (or a delegation), its budget ledger, its cost tree."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NoOpTracer, Tracer

from butler.delegation.conversation import converse
from butler.delegation.peers import DelegationPlan, PeerStatus
from butler.engine.plan_run import PlanSteps
from butler.engine.transitions import (
    ArtifactAdded,
    Event,
    Finished,
    InputRequested,
    PeerTaskKnown,
    Started,
)
from butler.engine.workspace import NoWorkspace, Workspace
from butler.identity.receipts import Sealing
from butler.planner import Planner, Toolbox
from butler.routing import Ranking, RouteCandidate
from butler.skills.base import (
    DelegationError,
    DelegationResult,
    FollowUp,
    PlanResult,
    SkillContext,
    SkillFailed,
    SkillRejected,
    SkillResult,
    to_result,
)
from butler.skills.catalog import Skill
from butler.swarm.decision import Admitted, SwarmDecision
from butler.swarm.spend import BudgetLedger
from butler.telemetry.logs import TRACE_ID
from butler.telemetry.traces import Incoming, remote_parent
from internal.protocol.a2a.client import PeerTracking, PeerUpdate
from internal.protocol.a2a.model import (
    Artifact,
    Budget,
    ButlerError,
    CostNode,
    Identity,
    Message,
    Part,
    PeerTask,
    Task,
    TaskError,
    TaskRequest,
    TaskState,
)
from internal.shares import Share

log = logging.getLogger("butler.engine")

_ZERO = Decimal(0)  # once: Decimal("0") parses its text at each call


class Delegator(Protocol):
    async def plan(self, capabilities: Sequence[str], chain: Sequence[str],
                   peer: str | None = None, skill: str | None = None) -> DelegationPlan:
        """Where a delegation of this would go: the one choice of peers."""

    async def delegate(
        self, *, plan: DelegationPlan, request: TaskRequest, chain: tuple[str, ...],
        budget: Decimal, deadline: float, parent_task_id: str = "", tree_id: str = "",
        tracking: PeerTracking | None = None,
    ) -> DelegationResult:
        """Send ``request`` to ``plan``'s targets, without choosing again."""

    async def resume(
        self, *, peer_task: PeerTask, request: TaskRequest, chain: tuple[str, ...],
        budget: Decimal, deadline: float, parent_task_id: str = "",
        tracking: PeerTracking | None = None, reattach: bool = False,
    ) -> DelegationResult:
        """The caller's answer to ``peer_task`` (or, ``reattach``, following it again)."""

    def abandon(self, peer_task: PeerTask) -> None:
        """``peer_task`` waits on its caller, and no answer will come: cancel it."""

    async def route_candidates(self, text: str = "") -> tuple[RouteCandidate, ...]: ...

    async def peer_status(self) -> list[PeerStatus]:
        """Every peer known now with its health, for the operator's overview."""

    async def aclose(self) -> None: ...


class RunEngine(Protocol):
    """What a run needs from the engine that started it (``TaskEngine``): the live task,
    and the one way to change it."""

    async def apply(self, task_id: str, event: Event) -> Task | None:
        """Apply ``event`` to the live task, persist and publish it; None if the task has
        ended already (the event is dropped)."""

    def live(self, task_id: str) -> Task | None: ...

    def followed(self, task_id: str) -> bool:
        """Whether someone follows the task's progress now (a caller streams it)."""

    async def until_followed(self, task_id: str) -> None:
        """Returns once someone follows the task's progress."""


def _merged(streamed: tuple[Artifact, ...], final: tuple[Artifact, ...]
            ) -> tuple[Artifact, ...]:
    """The artifacts the run streamed, each replaced by the result's of the same id (a
    peer's whole artifact, of which only the chunks seen were relayed), then the rest."""
    if not streamed or not final:
        return streamed + final
    last = {a.artifact_id: a for a in final}
    ids = {a.artifact_id for a in streamed}
    return (tuple(last.get(a.artifact_id, a) for a in streamed)
            + tuple(a for a in final if a.artifact_id not in ids))


def _no_audit(kind: str, **fields: Any) -> None:
    return None


def _unsealed(task: Task) -> Sealing | None:
    return None


async def _room_always() -> None:
    return None


@dataclass
class RunDeps:
    """What runs need from the daemon; defaults make an engine usable in tests."""

    agent_id: str
    tracer: Tracer = field(default_factory=lambda: trace.get_tracer("butler"))
    audit: Callable[..., None] = _no_audit
    audit_room: Callable[[], Awaitable[None]] = _room_always  # waits while audit is behind
    workspace: Workspace = field(default_factory=NoWorkspace)
    max_children: int = 8
    # What a task's error goes through: secrets a remote quoted back are taken out.
    redact: Callable[[str], str] = str
    # Running tasks, and each caller's share of them (``shares.running_tasks``).
    running_tasks: Share = field(default_factory=lambda: Share(1_000_000, 1_000_000))
    input_wait_seconds: float = 300.0  # a peer's question, relayed: its caller's answer
    planner: Planner | None = None  # the config's ``planner:``
    # A terminal task and its receipt's claims, which its commit turns into its receipt
    # (``butler.identity.receipt_log``); None: no receipts.
    seal: Callable[[Task], Sealing | None] = _unsealed

    @property
    def recording(self) -> bool:
        """Whether spans are recorded at all: when not, a span's attributes are not built,
        since nobody would read them."""
        return not isinstance(self.tracer, NoOpTracer)


class TaskRun:
    def __init__(self, engine: RunEngine, swarm: SwarmDecision, deps: RunDeps, task: Task,
                 skill: Skill | None, admitted: Admitted, caller: Identity, timeout: float,
                 incoming: Incoming | None, delegator: Delegator | None,
                 delegation: DelegationPlan | None = None, *,
                 reattach: PeerTask | None = None) -> None:
        """``swarm``: what the task's skill may route to or plan with (``route``,
        ``toolbox``); ``delegation``: where the task itself goes, when it is delegated
        (the swarm decision chose it). ``reattach``: the peer's task a delegation cut off
        by a restart follows again (``engine.reattach``)."""
        self.engine = engine
        self.swarm = swarm
        self.delegation = delegation
        self.reattach = reattach
        self.deps = deps
        self.delegator = delegator
        self.may_delegate = admitted.may_delegate
        self.task_id = task.id
        self.task = task
        self.skill = skill
        self.caller = caller
        self.chain = admitted.chain
        self.tree_id = admitted.tree_id
        # Only this caller's tasks of this tree share it: a caller who learns another's
        # tree id still lands in its own workspace.
        self.workspace_key = f"{admitted.tree_id or task.id}/{caller.name}"
        self.ledger = BudgetLedger(admitted.budget_usd)
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.children: list[CostNode] = []
        self.child_receipts: list[str] = []  # each child's receipts, its own first
        self.audit = deps.audit
        self._delegations = 0
        self._planning = False
        self.handle: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[FollowUp] | None = None
        self._charged = _ZERO
        self._incoming = incoming
        self._parent: Context | None = None  # made on first use (see ``_trace_parent``)

    def start(self) -> None:
        self.handle = asyncio.create_task(self._main(), name=f"task-{self.task_id}")

    def cancel(self) -> None:
        if self.handle is not None and not self.handle.done():
            self.handle.cancel()

    def answer(self, followup: FollowUp) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(followup)

    async def _main(self) -> None:
        TRACE_ID.set(self.task.trace_id)  # this asyncio task's own context: its log lines
        started = time.monotonic()
        if self.deps.recording:
            span = self.deps.tracer.start_span("butler.task", context=self._trace_parent(),
                                               attributes=self._span_attributes())
            with trace.use_span(span, end_on_exit=True):
                state = await self._finish(started)
                span.set_attribute("butler.state", state.value)
        else:
            await self._finish(started)

    def _span_attributes(self) -> dict[str, Any]:
        return {
            "butler.task_id": self.task_id, "butler.skill": self.task.skill,
            "butler.caller_chain": list(self.chain), "butler.depth": len(self.chain),
            "butler.budget_usd": str(self.ledger.start),
        }

    def _trace_parent(self) -> Context:
        if self._parent is None:
            self._parent = self._incoming.context() if self._incoming is not None \
                else remote_parent(self.task.trace_id)
        return self._parent

    async def _finish(self, started: float) -> TaskState:
        outcome = await self._outcome(started)
        try:
            await self.engine.apply(self.task_id, outcome)
        except Exception:
            # Whoever waits for the task got the error (``TaskEngine.apply``).
            log.exception("could not store the outcome of task %s", self.task_id)
        return outcome.state

    async def _outcome(self, started: float) -> Finished:
        # No ``Started`` to apply: the task was created working (``TaskEngine._create``).
        try:
            async with asyncio.timeout(self.timeout):
                result = await (self._run_skill() if self.skill else self._run_delegation())
        except asyncio.CancelledError:
            return self._ended(started, TaskState.CANCELED)
        except TimeoutError:
            return self._ended(started, TaskState.FAILED, "task_timeout",
                               f"task did not finish within {self.timeout:g}s")
        except SkillRejected as exc:
            return self._ended(started, TaskState.REJECTED, "rejected", exc.message)
        except ButlerError as exc:  # SkillFailed, or a refusal a skill let through
            return self._ended(started, TaskState.FAILED, exc.code, exc.message)
        except Exception as exc:
            log.exception("skill %s raised on task %s", self.task.skill, self.task_id)
            return self._ended(started, TaskState.FAILED, "skill_error",
                               f"{type(exc).__name__}: {str(exc)[:500]}")
        return self._ended(started, TaskState.COMPLETED, message=result.status_message or None,
                           parts=result.parts,
                           artifacts=_merged(self._artifacts(), result.artifacts),
                           as_message=result.as_message)

    def _ended(self, started: float, state: TaskState, code: str | None = None,
               message: str | None = None, **result: Any) -> Finished:
        """The outcome with what the run spent and delegated, made whole in one go rather
        than made and then copied with them; an error ``code`` as ``failed`` makes."""
        node = CostNode(self.deps.agent_id, self.task.skill, self._charged, int(
            (time.monotonic() - started) * 1000), state.value, tuple(self.children))
        if message is not None:  # often a remote's words: the one place they are redacted
            message = self.deps.redact(message)
        return Finished(state, error=None if code is None else TaskError(code, message or ""),
                        message=message, budget=Budget(self.ledger.start, self.ledger.spent),
                        cost=node, receipts=tuple(self.child_receipts), **result)

    def _artifacts(self) -> tuple[Artifact, ...]:
        live = self.engine.live(self.task_id)
        return live.artifacts if live is not None else ()

    @property
    def agent_id(self) -> str:
        return self.deps.agent_id

    async def _run_skill(self) -> SkillResult:
        assert self.skill is not None
        request = self.task.request
        ctx = self.context(self.skill, request.text, dict(request.input), request.parts,
                           request.message)
        result = await self.run_local(self.skill, ctx)
        self._charged = self.skill.config.cost_usd
        return result

    def context(self, skill: Skill, text: str, input: dict[str, Any],
                parts: tuple[Part, ...] = (), message: Message | None = None) -> SkillContext:
        return SkillContext(
            task_id=self.task_id, context_id=self.task.context_id, skill_id=skill.id,
            text=text, input=input, parts=parts, caller=self.caller.name, chain=self.chain,
            trace_id=self.task.trace_id, _host=self, message=message)

    async def run_local(self, skill: Skill, ctx: SkillContext) -> SkillResult:
        """Run ``skill`` here, its ``cost_usd`` reserved from this task's budget first: the
        task's own skill, or one a plan calls."""
        cost = skill.config.cost_usd
        reserved = self.ledger.reserve(cost, f"skill {skill.id}")
        span = self.deps.tracer.start_as_current_span(
            "butler.skill", attributes={"butler.skill": skill.id}
        ) if self.deps.recording else contextlib.nullcontext()
        with span:
            try:
                result = to_result(await skill.run(ctx))
            except BaseException:
                self.ledger.settle(reserved, Decimal("0"))
                raise
        self.ledger.settle(reserved, cost)
        return result

    async def _run_delegation(self) -> SkillResult:
        request = self.task.request
        plan = self.delegation or DelegationPlan(())  # re-attached: it goes where it went
        result = await self._send(self._delegator(), plan, request.text, dict(request.input),
                                  tracking=PeerTracking(
                                      self._watch_peer,
                                      lambda: self.engine.followed(self.task_id),
                                      lambda: self.engine.until_followed(self.task_id)),
                                  reattach=self.reattach)
        if result.state != TaskState.COMPLETED.value:
            raise SkillFailed(result.error_code or "peer_error",
                              f"{result.peer}: {result.error_message or result.state}")
        # Marked as its relayed chunks were: the final whole replaces them (``_merged``).
        return SkillResult(parts=result.parts, artifacts=tuple(
            replace(a, source=a.source or result.peer) for a in result.artifacts))

    async def _watch_peer(self, update: PeerUpdate) -> None:
        """The task's own delegation: its peer's task kept with it once known (a restart
        re-attaches to it), and the peer's progress relayed as it comes, marked with the
        agent it came from (docs/delegation.md#progress)."""
        live = self.engine.live(self.task_id)
        if live is None:
            return
        peer, task = update.ref.peer, update.task
        if live.peer_task != update.ref and not task.state.terminal:
            await self.engine.apply(self.task_id, PeerTaskKnown(update.ref))
        if update.artifact is not None:
            chunk = update.artifact
            await self.artifact(replace(chunk, source=chunk.source or peer),
                                append=update.append, last_chunk=update.last_chunk)
        elif task.state is TaskState.WORKING and task.status_message:
            await self.progress(f"[{peer}] {task.status_message}")

    # -- Host: what SkillContext calls ---------------------------------------------

    async def progress(self, message: str) -> None:
        await self.engine.apply(self.task_id, Started(message))

    async def artifact(self, artifact: Artifact, *, append: bool = False,
                       last_chunk: bool = True) -> None:
        await self.engine.apply(self.task_id, ArtifactAdded(artifact, append, last_chunk))

    async def request_input(self, prompt: str, *, auth: bool = False,
                            asked_by: str = "") -> FollowUp:
        self._waiter = asyncio.get_running_loop().create_future()
        await self.engine.apply(self.task_id, InputRequested(prompt, auth=auth,
                                                             asked_by=asked_by))
        try:
            return await self._waiter
        finally:
            self._waiter = None

    def budget_left(self) -> Decimal:
        return self.ledger.left

    async def route(self, text: str) -> Ranking:
        return await self.swarm.rank(self.caller, text, (*self.chain, self.deps.agent_id),
                                     self.delegator)

    async def toolbox(self, text: str = "") -> Toolbox:
        """``text``: the task being planned, whose router shortlist the model sees."""
        # No peers when the next hop would exceed the depth.
        skills, peers = await self.swarm.tools(
            self.caller, (*self.chain, self.deps.agent_id),
            self.delegator if self.may_delegate else None, text)
        # Not the skill that is planning: it would plan again.
        return Toolbox([s for s in skills if s is not self.skill], peers)

    async def plan(self, text: str, *, stream: bool = False) -> PlanResult:
        planner = self.deps.planner
        if planner is None:
            raise SkillFailed("planner_not_configured",
                              "this instance has no planner (the config's planner: section)")
        if self._planning:
            raise SkillFailed("planner_loop", "a plan's tool cannot start another plan")
        steps = PlanSteps(self, planner.cfg.model, stream)
        self._planning = True
        try:
            return await planner.plan(steps, text)
        finally:
            self._planning = False

    async def delegate(self, *, capabilities: Sequence[str], task: str,
                       input: dict[str, Any] | None, peer: str | None,
                       skill: str | None = None) -> DelegationResult:
        """A delegation a skill or a plan asks for: chosen here, then sent."""
        delegator = self._delegator()
        plan = await delegator.plan(capabilities, (*self.chain, self.deps.agent_id), peer,
                                    skill)
        return await self._send(delegator, plan, task, input)

    def _delegator(self) -> Delegator:
        """The delegator, if this task may delegate once more."""
        if self.delegator is None:
            raise SkillFailed("no_capable_peer", "this instance has no peers configured")
        # Counted apart from the cost tree's children: a plan's model calls are children too.
        if self._delegations >= self.deps.max_children:
            raise SkillFailed("too_many_delegations",
                              f"a task may delegate at most {self.deps.max_children} times")
        self._delegator_turn()
        return self.delegator

    def _delegator_turn(self) -> None:
        """Each turn of a delegation (the first, and each answer) is within max_depth."""
        if not self.may_delegate:
            raise SkillFailed("depth_exceeded", "delegating would exceed max_depth")

    async def _ask(self, result: DelegationResult) -> FollowUp:
        """The peer's question, asked of this task's caller: its answer."""
        return await self.request_input(
            result.status_message, auth=result.state == TaskState.AUTH_REQUIRED.value,
            asked_by=result.asked_by or result.peer)

    async def _send(self, delegator: Delegator, plan: DelegationPlan, task: str,
                    input: dict[str, Any] | None, tracking: PeerTracking | None = None,
                    reattach: PeerTask | None = None) -> DelegationResult:
        """One delegation, to its end: its peer's questions relayed to this task's caller
        (``conversation``). ``reattach``: the peer's task this delegation was following
        when this agent restarted, followed again instead of sending anything."""
        if not trace.get_current_span().get_span_context().is_valid:
            # Nothing records spans here, but the outbound call must still carry the
            # trace: it reads the parent from the current context.
            otel_context.attach(self._trace_parent())
        grant = self.ledger.reserve(self.ledger.left, "delegation")
        self._delegations += 1
        child_request = TaskRequest(text=task, input=input or {}, skill=plan.skill,
                                    capabilities_needed=plan.capabilities,
                                    context_id=self.task.context_id)
        result: DelegationResult | None = None
        chain = (*self.chain, self.deps.agent_id)

        async def answer(peer_task: PeerTask, followup: FollowUp) -> DelegationResult:
            self._delegator_turn()
            return await delegator.resume(
                peer_task=peer_task, chain=chain, budget=grant, deadline=self.deadline,
                request=TaskRequest(text=followup.text, input=followup.input,
                                    parts=followup.parts),
                parent_task_id=self.task_id, tracking=tracking)

        try:
            if reattach is not None:
                result = await delegator.resume(
                    peer_task=reattach, request=child_request, chain=chain, budget=grant,
                    deadline=self.deadline, parent_task_id=self.task_id, tracking=tracking,
                    reattach=True)
            else:
                result = await delegator.delegate(
                    plan=plan, request=child_request, chain=chain, budget=grant,
                    deadline=self.deadline, parent_task_id=self.task_id,
                    tree_id=self.tree_id, tracking=tracking)
            result = await converse(result, ask=self._ask, answer=answer,
                                    abandon=delegator.abandon,
                                    wait_seconds=self.deps.input_wait_seconds)
        except ButlerError as err:
            raise DelegationError(err.code, err.message) from None
        finally:
            self.ledger.settle(grant, result.spent_usd if result else Decimal("0"))
        if result.cost is not None:
            self.children.append(result.cost)
        self.child_receipts.extend(result.receipts)
        return result

    async def workspace_get(self, key: str) -> Any:
        return await self.deps.workspace.get(self.workspace_key, key)

    async def workspace_put(self, key: str, value: Any) -> None:
        try:
            await self.deps.workspace.put(self.workspace_key, key, value)
        except ValueError as exc:
            raise SkillFailed("workspace_error", str(exc)) from None
