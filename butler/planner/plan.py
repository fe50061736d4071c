"""The planner's loop: ask the model, run the tools it calls, give it their results, until
it answers in plain text or ``max_steps`` model calls are spent.

Every model call is paid for from the task's budget: its worst case (the request's size
as tokens, plus ``max_tokens``) is reserved before the call and settled to the ``usage``
the answer reports, so a call that could overspend is never made. Every tool call runs
through the host (``butler.engine.plan_run``), that is through the engine's own paths for a
local skill or a delegation, with their budget, depth, loop and audit rules.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from butler.config.model import PlannerConfig
from butler.planner.client import ChatClient, PlannerTimeout
from butler.planner.tools import Step, Toolbox
from butler.planner.wire import Completion, Usage
from butler.skills.base import PlanResult, SkillFailed

# A chat template adds a few tokens per message around what the request's bytes hold.
TOKENS_PER_MESSAGE = 8
TOKENS_PER_REQUEST = 64
RESULT_CHARS = 8000  # of one tool result, given back to the model
LOOP = "planner_loop"
TOO_MANY_STEPS = "planner_too_many_steps"

SYSTEM_PROMPT = (
    "You are the planner of the agent {agent}. Do the user's task with the tools you are "
    "given: call as many as it needs, one after another or together, then answer the user "
    "in plain text, using what the tools returned. Never call a tool twice with the same "
    "arguments. Answer without tools when none fits."
)


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a tool call gave back: its text for the model, and how it ended."""

    text: str
    state: str = "completed"
    code: str = ""


class PlanHost(Protocol):
    """What a plan needs from the task it runs in (``butler.engine.plan_run.PlanSteps``)."""

    @property
    def agent_id(self) -> str: ...

    @property
    def deadline(self) -> float:
        """When the task must have ended (``time.monotonic``)."""

    def reserve(self, amount: Decimal, what: str) -> Decimal:
        """Reserve from the task's budget; raises ``Refusal("budget_exhausted")``."""

    def settle(self, reserved: Decimal, actual: Decimal) -> None: ...

    def model_call(self, step: int, usage: Usage | None, cost: Decimal, seconds: float,
                   code: str = "") -> None:
        """A model call ended (``code``: it failed): the audit trail and the cost tree."""

    async def toolbox(self, text: str) -> Toolbox:
        """The tools for planning ``text``: the router's shortlist for it."""

    async def run(self, step: Step) -> ToolOutcome: ...

    async def relay(self, text: str, *, last: bool = False) -> None:
        """Streamed text, on to whoever follows the task."""


def price(cfg: PlannerConfig, input_tokens: int, output_tokens: int) -> Decimal:
    return (cfg.price_per_1k_input_usd * input_tokens
            + cfg.price_per_1k_output_usd * output_tokens) / 1000


def worst_case_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    """An upper bound of the request's input tokens: its bytes (a byte-level tokenizer's
    token is at least one byte), plus the template's own."""
    size = len(json.dumps([messages, tools]).encode())
    return size + TOKENS_PER_MESSAGE * len(messages) + TOKENS_PER_REQUEST


class Planner:
    def __init__(self, cfg: PlannerConfig, client: ChatClient | None = None) -> None:
        self.cfg = cfg
        self.client = client or ChatClient(cfg)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def plan(self, host: PlanHost, text: str) -> PlanResult:
        cfg = self.cfg
        toolbox = await host.toolbox(text)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT.format(agent=host.agent_id)},
            {"role": "user", "content": text},
        ]
        said: list[str] = []
        ran: list[str] = []
        seen: set[tuple[str, str]] = set()
        spent = Decimal("0")
        for step in range(1, cfg.max_steps + 1):
            answer, cost = await self._call(host, step, messages, toolbox)
            spent += cost
            said.append(answer.content)
            if not answer.tool_calls:
                await host.relay("", last=True)
                return PlanResult("".join(said), step, tuple(ran), spent)
            steps = [toolbox.read(call) for call in answer.tool_calls]  # all, before any runs
            messages.append(answer.message())
            for item in steps:
                key = (item.call.name, _canonical(item.call.arguments))
                if key in seen:
                    raise SkillFailed(LOOP, f"the model called {item.call.name} again with "
                                      "the same arguments; a plan does not repeat a step")
                seen.add(key)
                outcome = await host.run(item)
                ran.append(item.label)
                messages.append({"role": "tool", "tool_call_id": item.call.id,
                                 "content": outcome.text[:RESULT_CHARS]})
        raise SkillFailed(TOO_MANY_STEPS, f"the plan did not finish within {cfg.max_steps} "
                          "model calls (planner.max_steps)")

    async def _call(self, host: PlanHost, step: int, messages: list[dict[str, Any]],
                    toolbox: Toolbox) -> tuple[Completion, Decimal]:
        cfg = self.cfg
        worst = price(cfg, worst_case_tokens(messages, toolbox.specs), cfg.max_tokens)
        # Refused here, before the request: a plan never spends what the budget lacks.
        reserved = host.reserve(worst, f"the planner's model call {step}")
        started = time.monotonic()
        try:
            answer = await self.client.complete(messages, toolbox.specs,
                                                deadline=host.deadline, on_text=host.relay)
        except SkillFailed as exc:
            # A refused or failed call did no work and is not charged; one that timed out
            # may have, and is charged its reservation, the most it could cost
            # (docs/intent.md).
            cost = reserved if isinstance(exc, PlannerTimeout) else Decimal("0")
            host.settle(reserved, cost)
            host.model_call(step, None, cost, time.monotonic() - started, exc.code)
            raise
        except BaseException:
            # Canceled (the task's deadline, the caller): the endpoint had the request.
            host.settle(reserved, reserved)
            raise
        usage = answer.usage
        cost = reserved if usage is None else min(
            reserved, price(cfg, usage.input_tokens, usage.output_tokens))
        host.settle(reserved, cost)
        host.model_call(step, usage, cost, time.monotonic() - started)
        return answer, cost


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except ValueError:
        return arguments
