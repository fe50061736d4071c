"""The task engine: every binding's requests end here.

The swarm decision (admission and plan, ``butler.swarm.decision``) -> task committed ->
run -> events. Every change goes through the pure ``transitions.apply``, synchronously,
then is persisted and published, so a terminal task can never change again (a result
that arrives after a cancel is discarded).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from butler.engine.events import EventHub, OutcomeWaiters
from butler.engine.outcome import final_record
from butler.engine.purge import PurgeListener, purge_loop
from butler.engine.reattach import admitted_again, owner_of, reattachable, time_left
from butler.engine.recovery import FinalRecords, recover
from butler.engine.run import Delegator, RunDeps, TaskRun
from butler.engine.shutdown import stop_runs
from butler.engine.store import TaskStore
from butler.engine.task_document import NotStorable
from butler.engine.task_ids import lookup
from butler.engine.transitions import (
    ArtifactAdded,
    Canceled,
    Event,
    InputReceived,
    PeerTaskKnown,
    Started,
    apply,
    created,
    interrupted,
)
from butler.identity.receipts import Sealed
from butler.runtime.clock import now_iso
from butler.runtime.ids import IDS
from butler.skills.base import FollowUp
from butler.skills.catalog import Skill, SkillCatalog
from butler.swarm.decision import (
    DELEGATE_SKILL,
    Admitted,
    Delegate,
    NoPlan,
    RunSkill,
    SwarmDecision,
    SwarmPolicy,
)
from butler.swarm.spend import SpendBook
from butler.telemetry.logs import TRACE_ID
from butler.telemetry.task_log import log_task_started
from butler.telemetry.traces import trace_of
from internal.protocol.a2a.model import (
    AuthError,
    Budget,
    Envelope,
    Identity,
    Refusal,
    RequestError,
    StateConflict,
    Task,
    TaskEvent,
    TaskPage,
    TaskRequest,
    TaskState,
    scoped_task_id,
)
from internal.shares import FairPool, Held, PoolFull

log = logging.getLogger("butler.engine")

# How long the first write of a blocking task without the caller's id may wait for the
# task's next one (see ``_create``): a crash within it leaves no record of a task whose
# caller was never answered. docs/tasks.md
FIRST_WRITE_DEFER_SECONDS = 0.05
# A task whose output the store cannot keep fails with it (``_not_storable``).
NOT_STORABLE = "output_not_storable"


class TaskEngine:
    def __init__(self, deps: RunDeps, *, store: TaskStore, catalog: SkillCatalog,
                 policy: SwarmPolicy, delegator: Delegator | None,
                 retention_hours: float, default_timeout: float,
                 card: Callable[[Identity], dict[str, Any]],
                 spend: SpendBook | None = None) -> None:
        self.card = card
        self.deps = deps
        self.store = store
        self.catalog = catalog
        self.swarm = SwarmDecision(policy, catalog, spend or SpendBook({}))
        self.delegator = delegator
        self.hub = EventHub()
        self._retention = retention_hours * 3600
        self._default_timeout = default_timeout
        self._live: dict[str, Task] = {}
        self._runs: dict[str, TaskRun] = {}
        # Running tasks, each caller within its share (``shares.running_tasks``); each run
        # holds its place from admission (``_places``) until it ends.
        self._running = FairPool("running tasks", deps.running_tasks)
        self._places: dict[str, Held] = {}
        self._claims: dict[str, asyncio.Event] = {}
        self._waiters = OutcomeWaiters()
        self._purger: asyncio.Task[None] | None = None
        # Called with the ids of purged tasks, so what belongs to them goes too.
        self.purge_listeners: list[PurgeListener] = []

    # -- lifecycle ---------------------------------------------------------------

    async def start(self, records: FinalRecords | None = None) -> int:
        """Repair what the previous process left (``recovery``); returns how many tasks it
        cut off. ``records``: the audit log, to find final records it lost."""
        stale = await recover(self.store, self._audit_final, records, self._store,
                              self._reattach)
        self._purger = asyncio.create_task(
            purge_loop(self.store, self._retention, self.purge_listeners))
        return stale

    def _reattach(self, task: Task) -> bool:
        """Start again the run of a delegation the restart cut off: it follows its peer's
        task (``engine.reattach``). False for any other task."""
        peer_task = task.peer_task
        if self.delegator is None or peer_task is None or not reattachable(task):
            return False
        try:
            place = self._running.take(task.owner)
        except PoolFull:  # more to take up than its owner's share: it ends, as any other
            return False
        # Working again at once: an answer that comes before its run asks again is
        # refused (``task_not_waiting``) rather than lost. Stored with its next change.
        task = apply(task, Started(f"following {peer_task.peer}'s task again after a "
                                   "restart"), now_iso())
        run = TaskRun(self, self.swarm, self.deps, task, None,
                      admitted_again(task, self.swarm.policy), owner_of(task),
                      time_left(task, self._timeout(None, task.request)), None,
                      self.delegator, reattach=peer_task)
        # Its run starts again: the operator's log says so, as for a new task.
        log_task_started(task.id, task.owner, task.skill, peer_task.peer, task.trace_id)
        self._start(run, place)
        return True

    async def stop(self, grace: float) -> None:
        purger, self._purger = self._purger, None
        if purger is not None:
            purger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await purger
        await stop_runs(self._runs, self._live, self.apply, grace)

    # -- requests ----------------------------------------------------------------

    async def submit(self, caller: Identity, request: TaskRequest, envelope: Envelope) -> Task:
        if request.id is None:
            task, outcome = await self._create(caller, request, envelope)
        else:
            task, outcome = await self._create_once(request.id, caller, request, envelope)
        if outcome is not None:
            return await self._waiters.until(task.id, outcome)
        return await self._answer(task, request.blocking)

    async def _create_once(self, task_id: str, caller: Identity, request: TaskRequest,
                           envelope: Envelope) -> tuple[Task, asyncio.Future[Task] | None]:
        """Submits of one id take turns, so a concurrent repeat finds the first one's task."""
        while (busy := self._claims.get(task_id)) is not None:
            await busy.wait()
        self._claims[task_id] = claim = asyncio.Event()
        try:
            own, others = await lookup(caller, task_id, self._live, self.store)
            if own is not None:
                return own, None
            stored_as = task_id if others is None else scoped_task_id(task_id, caller.name)
            return await self._create(caller, request, envelope, stored_as)
        finally:
            del self._claims[task_id]
            claim.set()

    async def _create(self, caller: Identity, request: TaskRequest, envelope: Envelope,
                      task_id: str | None = None) -> tuple[Task, asyncio.Future[Task] | None]:
        """Admit, persist and start: the task is acknowledged only once committed. For a
        blocking request, also the future its caller waits on for the outcome.

        A blocking task without an id of its caller's starts before its first commit, not
        after it, and that commit waits up to ``FIRST_WRITE_DEFER_SECONDS`` for the next
        write of the task: one that finishes by then (an echo, a quick delegation) is
        written once, finished, instead of twice. Its caller is answered only with the
        outcome, which is committed first."""
        await self.deps.audit_room()  # back-pressure: the audit trail must keep up
        # Checked and counted in one step, before the decision's awaits: concurrent submits
        # are counted exactly. The run holds the place from its start; anything that ends
        # the request before gives it back.
        place = self._running.take(caller.name)
        try:
            run = await self._admit(caller, request, envelope, task_id)
        except BaseException:
            place.release()
            raise
        if isinstance(run, Task):  # no plan: it ended at once, failed, saying why
            place.release()
            return run, None
        task = run.task
        if not request.blocking or request.id is not None:
            # Committed first: a stream that follows the task sees every change it makes,
            # and a task with the caller's own id runs at most once, even across a crash.
            try:
                await self._first_write(task)
            except BaseException:
                place.release()
                raise
            self._start(run, place)
            return task, None
        outcome = self._waiters.watch(task.id)
        self._start(run, place)
        try:
            await self.store.put(task, FIRST_WRITE_DEFER_SECONDS)
        except Exception:
            self._abandon(run, outcome)
            raise
        except BaseException:  # the caller went away: its task goes on without it
            self._waiters.unwatch(task.id, outcome)
            raise
        return task, outcome

    async def _first_write(self, task: Task) -> Sealed:
        """The commit that acknowledges a task not yet running (or ended already). When it
        fails the task was never acknowledged: it ends here, with its final record (its
        reservation settled)."""
        try:
            return await self._store(task)
        except Exception:
            why = "the task could not be stored"
            self._audit_final(interrupted(task, "store_unavailable", why, now_iso()))
            raise

    async def _admit(self, caller: Identity, request: TaskRequest,
                     envelope: Envelope, task_id: str | None) -> TaskRun | Task:
        """The swarm's decision on a request: the run to start, or the task already ended
        (failed, saying why) when there is no plan for it."""
        trace_id, incoming = trace_of(envelope)
        TRACE_ID.set(trace_id)
        task_id = task_id or IDS.ordered128()
        try:
            decision = await self.swarm.decide(caller, envelope, request, self.delegator,
                                               task_id)
        except (Refusal, AuthError) as err:
            # Every refusal, whichever check made it, is recorded once, here.
            self.deps.audit("refusal", caller=caller.name, task_id=request.id,
                            chain=envelope.chain, budget_before=envelope.budget_usd,
                            budget_after=envelope.budget_usd, decision="refused",
                            code=err.code, trace_id=trace_id)
            raise
        admitted, plan = decision.admitted, decision.plan
        skill = plan.skill if isinstance(plan, RunSkill) else None
        if isinstance(plan, NoPlan):
            task = self._new_task(caller, request, admitted, trace_id, task_id)
            task = interrupted(task, plan.code, plan.message, now_iso())
        else:
            # It runs right after its commit: recorded as working in that first write,
            # not as "submitted" and then "working".
            task = self._new_task(caller, request, admitted, trace_id, task_id,
                                  skill.id if skill else DELEGATE_SKILL)
        self.deps.audit("inbound", caller=caller.name, task_id=task.id, chain=task.chain,
                        budget_before=admitted.budget_usd, budget_after=None,
                        decision="accepted", trace_id=task.trace_id)
        if not task.state.terminal:
            log_task_started(task.id, caller.name, task.skill, _first_peer(plan), task.trace_id)
        if task.state.terminal:  # no plan: it ends here, failed, saying why
            sealed = await self._first_write(task)
            self._audit_final(sealed.task, sealed=sealed)
            return sealed.task
        return TaskRun(self, self.swarm, self.deps, task, skill, admitted, caller,
                       self._timeout(skill, request), incoming, self.delegator,
                       plan.delegation if isinstance(plan, Delegate) else None)

    def _start(self, run: TaskRun, place: Held) -> None:
        self._live[run.task_id] = run.task
        self._runs[run.task_id] = run
        self._places[run.task_id] = place
        run.start()

    def _abandon(self, run: TaskRun, outcome: asyncio.Future[Task] | None) -> None:
        """The first commit failed: the task was never acknowledged, so its run stops."""
        if outcome is not None:
            self._waiters.unwatch(run.task_id, outcome)
        task = self._live.get(run.task_id)
        if task is not None and not task.state.terminal:
            why = "the task could not be stored"
            ended = interrupted(task, "store_unavailable", why, now_iso())
            self._finalise(ended)
            self._audit_final(ended)
        run.cancel()

    def _new_task(self, caller: Identity, request: TaskRequest, admitted: Admitted,
                  trace_id: str, task_id: str, skill: str | None = None) -> Task:
        """Submitted; or, given the ``skill`` it runs, already working (``created``)."""
        now = now_iso()
        context_id = request.context_id or IDS.ordered128()
        message = request.message
        return created(
            now,
            running=skill is not None,
            id=task_id,
            context_id=context_id,
            skill=skill or "",
            messages=() if message is None else (
                replace(message, task_id=task_id, context_id=context_id, at=now),),
            owner=caller.name,
            request=request,
            budget=Budget(admitted.budget_usd),
            chain=admitted.chain,
            trace_id=trace_id,
        )

    def _timeout(self, skill: Skill | None, request: TaskRequest) -> float:
        limit = skill.config.timeout_seconds if skill else self._default_timeout
        if request.timeout_seconds is not None:
            limit = min(limit, request.timeout_seconds)
        return limit

    async def _answer(self, task: Task, blocking: bool) -> Task:
        if not blocking or task.state.terminal or task.state.interrupted:
            return task
        return await self.wait(task.id)

    async def wait(self, task_id: str) -> Task:
        """Until the task is terminal or waits on its caller."""
        current = self._live.get(task_id) or await self.store.get(task_id)
        if current is None:
            raise RequestError("task_not_found", f"no task {task_id}")
        if current.state.terminal or current.state.interrupted:
            return current
        return await self._waiters.until(task_id, self._waiters.watch(task_id))

    async def get(self, caller: Identity, task_id: str) -> Task:
        """The caller's task by the id it knows (an admin's: anyone's)."""
        own, others = await lookup(caller, task_id, self._live, self.store)
        task = own or (others if caller.is_admin else None)
        if task is None:
            raise RequestError("task_not_found", f"no task {task_id}")
        return task

    async def list_tasks(self, caller: Identity, *, state: TaskState | None,
                         context_id: str | None, cursor: str | None, limit: int,
                         updated_after: str | None = None, by_update: bool = False) -> TaskPage:
        return await self.store.list_tasks(
            owner=None if caller.is_admin else caller.name, state=state,
            context_id=context_id, cursor=cursor, limit=limit, updated_after=updated_after,
            by_update=by_update)

    async def cancel(self, caller: Identity, task_id: str) -> Task:
        task = await self.get(caller, task_id)
        event = Canceled(caller.name)
        apply(task, event, task.updated_at)  # an ended task: the transition refuses
        # Taken before the change: a terminal change drops the run from ``_runs``.
        run = self._runs.get(task.id)
        updated = await self.apply(task.id, event)
        if run is not None:
            run.cancel()
        return updated or await self.get(caller, task.id)

    async def answer(self, caller: Identity, task_id: str, reply: TaskRequest) -> Task:
        """A follow-up message resuming a task that waits in ``input-required``."""
        followup = FollowUp(text=reply.text, input=dict(reply.input), parts=reply.parts,
                            message=reply.message)
        task = await self.get(caller, task_id)
        event = InputReceived(reply.message)
        apply(task, event, task.updated_at)  # ended, or not waiting: the transition refuses
        run = self._runs.get(task.id)
        if run is None:
            raise StateConflict("task_not_waiting",
                                f"task {task_id} is {task.state.value}, not waiting for input")
        updated = await self.apply(task.id, event)
        run.answer(followup)
        return await self._answer(updated or task, reply.blocking)

    async def events(self, caller: Identity, task_id: str) -> AsyncIterator[TaskEvent]:
        """The task now, then each change, ending after a terminal state."""
        task = await self.get(caller, task_id)
        async with self.hub.subscribe(task.id) as queue:
            # Re-read once subscribed: it may have finished (and left ``_live``) meanwhile.
            task = self._live.get(task.id) or await self.store.get(task.id) or task
            yield TaskEvent(task, "status")
            if task.state.terminal:
                return
            while True:
                event = await queue.get()
                if event is None:
                    return
                # A change is applied in memory, committed, then published: the snapshot
                # above may already show one whose event is still queued. Skip those.
                if event.task.updated_at <= task.updated_at:
                    continue
                yield event
                if event.final:
                    return

    # -- state changes (``RunEngine``: called by runs) ----------------------------

    def followed(self, task_id: str) -> bool:
        return self.hub.subscribers(task_id) > 0

    async def until_followed(self, task_id: str) -> None:
        await self.hub.until_followed(task_id)

    async def apply(self, task_id: str, event: Event) -> Task | None:
        """Apply ``event`` to the live task (``transitions.apply``), persist, publish.
        None when the task has ended already: whatever arrives after that is dropped."""
        current = self._live.get(task_id)
        if current is None:
            return None
        try:
            task = apply(current, event, now_iso())
        except StateConflict:
            return None
        if task is current:
            return current  # nothing to record
        self._live[task_id] = task
        run = self._runs.get(task_id)
        if isinstance(event, PeerTaskKnown):  # kept, not a change anyone follows
            await self.store.put(task)
            return task
        if isinstance(event, ArtifactAdded):
            try:
                await self.store.put(task)
            except NotStorable as exc:
                return await self._not_storable(current, task, exc, run)
            self.hub.publish(TaskEvent(task, "artifact", event.artifact, append=event.append,
                                       last_chunk=event.last_chunk))
            return task
        return await self._commit(task, current, run)

    async def _store(self, task: Task) -> Sealed:
        """Commits ``task``; one that ended gets its receipt in the commit."""
        sealing = self.deps.seal(task) if task.state.terminal else None
        if sealing is None:
            await self.store.put(task)
            return Sealed(task, "")
        return await self.store.seal(sealing)

    async def _commit(self, task: Task, before: Task, run: TaskRun | None) -> Task:
        """Persist a new state of the task, then record, publish and settle it."""
        if task.state.terminal:
            self._finalise(task)
        try:
            sealed = await self._store(task)
        except NotStorable as exc:
            return await self._not_storable(before, task, exc, run)
        except Exception as exc:
            self._waiters.fail(task.id, exc)
            raise
        task = sealed.task  # with its receipt, if it ended
        if task.state.terminal:
            # Only once the end is committed: a crash in between leaves the task open,
            # to be ended (and recorded once) at start-up, never recorded twice.
            self._audit_final(task, sealed=sealed)
        self.hub.publish(TaskEvent(task, "status"))
        if task.state.terminal or task.state.interrupted:
            self._waiters.resolve(task)
        return task

    async def _not_storable(self, before: Task, task: Task, exc: NotStorable,
                            run: TaskRun | None) -> Task:
        """What the run gave (``task``) cannot be stored: the task fails alone, from its
        last stored state (``before``), keeping what was spent and delegated, and its run
        is stopped (at its next wait: this change is recorded first)."""
        if task.error is not None and task.error.code == NOT_STORABLE:
            raise exc  # even its failure could not be stored: the store's own error
        log.warning("task %s: its output cannot be stored: %s", task.id, exc.why)
        failed = interrupted(before, NOT_STORABLE,
                             f"the output cannot be stored: {exc.why}", now_iso())
        ended = replace(failed, cost=task.cost or failed.cost,
                        budget=task.budget or failed.budget, receipts=task.receipts)
        self._live[task.id] = ended
        try:
            ended = await self._commit(ended, before, None)
        except NotStorable:  # what it spent or delegated is not storable either
            self._live[task.id] = failed
            ended = await self._commit(failed, before, None)
        if run is not None and not task.state.terminal:
            run.cancel()
        return ended

    def _finalise(self, task: Task) -> None:
        self._live.pop(task.id, None)
        self._runs.pop(task.id, None)
        place = self._places.pop(task.id, None)
        if place is not None:
            place.release()

    def _audit_final(self, task: Task, at: datetime | None = None,
                     sealed: Sealed | None = None) -> None:
        """Every task that was created gets exactly one of these, however it ended; so its
        caller's spending is settled here too. ``sealed``: how it was just sealed."""
        self.swarm.settle(task)
        self.deps.audit("task_finished", **final_record(task, at, sealed))

    @property
    def running(self) -> int:
        """How many tasks hold a place in the running pool now."""
        return self._running.in_use

    def running_by_state(self) -> dict[str, int]:
        """How many tasks are not yet final, by state (every such state, 0 included)."""
        counts = dict.fromkeys((s.value for s in TaskState if not s.terminal), 0)
        for task in self._live.values():
            if not task.state.terminal:
                counts[task.state.value] += 1
        return counts

    def live(self, task_id: str) -> Task | None:
        return self._live.get(task_id)


def _first_peer(plan: object) -> str | None:
    """The peer a delegation goes to first (None for a local skill)."""
    if not isinstance(plan, Delegate):
        return None
    targets = plan.delegation.targets
    return plan.delegation.peer or (targets[0].name if targets else None)
