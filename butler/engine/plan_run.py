"""A plan inside a running task: the planner's host (``butler.planner.plan.PlanHost``).

Each tool call goes the way any work of a task goes: a local skill through the run's
``run_local`` (its cost reserved from the task's budget), a peer through the run's
``delegate`` (the one delegation path: chain, depth, budget, trace, ``delegation_*`` audit
records). What a plan adds is recorded the same way: a ``planner_call`` audit record and a
cost-tree child per model call, a ``planner_tool`` record and (for a local skill) a child
per tool call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from butler.planner import Step, Toolbox, ToolOutcome, Usage
from butler.planner.tools import DelegateTool, LocalTool
from butler.planner.wire import bad
from butler.skills.base import DelegationResult, SkillContext, SkillFailed, SkillResult
from butler.skills.catalog import Skill
from butler.swarm.spend import BudgetLedger
from internal.protocol.a2a.model import (
    Artifact,
    ButlerError,
    CostNode,
    Identity,
    Part,
    Refusal,
    Task,
    TaskState,
    agent_key,
)

# Failures that end the plan, as they would end any task: a safety refusal is never
# worked around by trying something else.
ENDS_THE_PLAN = frozenset({"loop_detected", "depth_exceeded", "budget_exhausted",
                           "spend_limit_reached", "too_many_delegations"})
RELAY_CHARS = 64  # streamed text is relayed in pieces of about this size


class PlanningRun(Protocol):
    """What a plan needs of its task's run (``TaskRun``)."""

    task: Task
    task_id: str
    caller: Identity
    chain: tuple[str, ...]
    deadline: float
    ledger: BudgetLedger
    children: list[CostNode]
    audit: Callable[..., None]

    @property
    def agent_id(self) -> str: ...

    async def toolbox(self, text: str) -> Toolbox: ...

    async def run_local(self, skill: Skill, ctx: SkillContext) -> SkillResult: ...

    def context(self, skill: Skill, text: str, input: dict[str, Any]) -> SkillContext: ...

    async def delegate(self, *, capabilities: Sequence[str], task: str,
                       input: dict[str, Any] | None, peer: str | None,
                       skill: str | None = None) -> DelegationResult: ...

    async def artifact(self, artifact: Artifact, *, append: bool = False,
                       last_chunk: bool = True) -> None: ...


@dataclass
class PlanSteps:
    """``PlanHost`` over a task's run; ``stream``: relay the model's text to the task's
    ``answer`` artifact (otherwise the skill that asked composes its own answer)."""

    task_run: PlanningRun
    model: str
    stream: bool = False
    _pending: str = ""
    _relayed: bool = False

    @property
    def agent_id(self) -> str:
        return self.task_run.agent_id

    @property
    def deadline(self) -> float:
        return self.task_run.deadline

    def reserve(self, amount: Decimal, what: str) -> Decimal:
        return self.task_run.ledger.reserve(amount, what)

    def settle(self, reserved: Decimal, actual: Decimal) -> None:
        self.task_run.ledger.settle(reserved, actual)

    def model_call(self, step: int, usage: Usage | None, cost: Decimal, seconds: float,
                   code: str = "") -> None:
        run = self.task_run
        status = "failed" if code else TaskState.COMPLETED.value
        run.children.append(CostNode(agent=run.agent_id, skill=f"planner:{self.model}",
                                     cost_usd=cost, duration_ms=int(seconds * 1000),
                                     status=status))
        tokens = {} if usage is None else {"input_tokens": usage.input_tokens,
                                           "output_tokens": usage.output_tokens}
        self._audit("planner_call", "error" if code else "ok", code or None,
                    {"model": self.model, "step": step, "cost_usd": str(cost),
                     "seconds": f"{seconds:.6f}", **tokens})

    async def toolbox(self, text: str) -> Toolbox:
        return await self.task_run.toolbox(text)

    async def run(self, step: Step) -> ToolOutcome:
        try:
            if isinstance(step.tool, LocalTool):
                outcome = await self._local(step.tool.skill, step)
            else:
                outcome = await self._delegate(step)
        except SkillFailed as exc:
            self._audit("planner_tool", "error", exc.code, self._detail(step))
            if exc.code in ENDS_THE_PLAN:
                raise
            # Any other failure is the tool's answer: the model may try another way.
            return ToolOutcome(_json({"error": {"code": exc.code, "message": exc.message}}),
                               TaskState.FAILED.value, exc.code)
        except ButlerError as exc:  # a refusal, or the run could not go on: the task ends
            self._audit("planner_tool", "error", exc.code, self._detail(step))
            raise
        except Exception:  # a plugin's own exception: the task fails as any run does
            self._audit("planner_tool", "error", "internal_error", self._detail(step))
            raise
        self._audit("planner_tool", outcome.state, outcome.code or None, self._detail(step))
        return outcome

    async def _local(self, skill: Skill, step: Step) -> ToolOutcome:
        run = self.task_run
        started = time.monotonic()
        try:
            result = await run.run_local(skill, run.context(skill, step.text, step.input))
        except SkillFailed:
            run.children.append(self._node(skill.id, Decimal("0"), started, "failed"))
            raise
        run.children.append(self._node(skill.id, skill.config.cost_usd, started, "completed"))
        return ToolOutcome(_parts_text(result.parts, result.artifacts))

    async def _delegate(self, step: Step) -> ToolOutcome:
        run = self.task_run
        if agent_key(step.peer) in {agent_key(a) for a in (*run.chain, run.agent_id)}:
            raise Refusal("loop_detected", f"the plan would delegate to {step.peer}, which is "
                          f"already in the caller chain {' -> '.join(run.chain) or '(empty)'}"
                          f" -> {run.agent_id}", details={"peer": step.peer})
        assert isinstance(step.tool, DelegateTool)
        if not step.tool.allows(step.peer, step.skill):
            raise bad(f"the model named {step.label!r}, which is not among the peers and "
                      "skills it was offered")
        done = await run.delegate(capabilities=(), task=step.text, input=None, peer=step.peer,
                                  skill=step.skill)
        if done.state != TaskState.COMPLETED.value:
            return ToolOutcome(_json({"error": {"code": done.error_code or done.state,
                                                "message": done.error_message}}),
                               done.state, done.error_code)
        return ToolOutcome(_parts_text(done.parts, done.artifacts))

    def _node(self, skill: str, cost: Decimal, started: float, status: str) -> CostNode:
        return CostNode(agent=self.task_run.agent_id, skill=skill, cost_usd=cost,
                        duration_ms=int((time.monotonic() - started) * 1000), status=status)

    @staticmethod
    def _detail(step: Step) -> dict[str, Any]:
        where = {"skill": step.tool.skill.id} if isinstance(step.tool, LocalTool) \
            else {"peer": step.peer, **({"skill": step.skill} if step.skill else {})}
        return {"tool": step.call.name, **where}

    def _audit(self, kind: str, decision: str, code: str | None,
               detail: dict[str, Any]) -> None:
        run = self.task_run
        left = run.ledger.left
        run.audit(kind, caller=run.agent_id, task_id=run.task_id, chain=run.chain,
                  budget_before=None, budget_after=left, decision=decision, code=code,
                  trace_id=run.task.trace_id, detail=detail)

    async def relay(self, text: str, *, last: bool = False) -> None:
        """Streamed text goes to the task's ``answer`` artifact in pieces (each one is a
        commit and an event); ``last`` closes it."""
        if not self.stream:
            return
        self._pending += text
        if not last and len(self._pending) < RELAY_CHARS and "\n" not in self._pending:
            return
        if last and not self._relayed and not self._pending:
            return
        piece, self._pending = self._pending, ""
        artifact = Artifact(artifact_id=f"{self.task_run.task_id}-answer", name="answer",
                            parts=(Part(text=piece),))
        await self.task_run.artifact(artifact, append=self._relayed, last_chunk=last)
        self._relayed = True


def _parts_text(parts: Sequence[Part], artifacts: Sequence[Artifact]) -> str:
    """A tool's result as the model reads it: its text, and its data as JSON."""
    out = []
    for part in (*parts, *(p for a in artifacts for p in a.parts)):
        if part.text is not None:
            out.append(part.text)
        elif part.data is not None:
            out.append(_json(part.data))
    return "\n".join(out) or "(no output)"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
