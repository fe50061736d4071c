"""What a skill is, and the context it runs with: the plugin API (docs/skills.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NoReturn, Protocol

from butler.routing import Ranking
from internal.protocol.a2a.model import (
    Artifact,
    CostNode,
    Message,
    Part,
    PeerTask,
    TaskFailed,
    TaskState,
)


class SkillFailed(TaskFailed):
    """Raise from a skill to fail its task with a machine-readable code."""


class DelegationError(SkillFailed):
    """``ctx.delegate`` could not get the work done: refused (``loop_detected``,
    ``depth_exceeded``, ``budget_exhausted``...) or the peer failed. Uncaught, it fails the
    task with the same code."""


class SkillRejected(TaskFailed):
    """The skill will not do this task (state ``rejected``)."""

    def __init__(self, reason: str) -> None:
        super().__init__("rejected", reason)


@dataclass(frozen=True, slots=True)
class FollowUp:
    """The caller's answer to ``request_input``."""

    text: str
    input: dict[str, Any]
    parts: tuple[Part, ...]
    message: Message | None = None  # the caller's A2A message, with its metadata


@dataclass(frozen=True, slots=True)
class SkillResult:
    parts: tuple[Part, ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    status_message: str = ""  # the final status's message (A2A ``status.message``)
    # Answer with a message only, no task (A2A allows either); the task is still kept
    # here, for /v2, the audit trail and the operator.
    as_message: bool = False


@dataclass(frozen=True, slots=True)
class DelegationResult:
    """What a peer returned: its parts and artifacts, what it spent, its cost tree."""

    peer: str
    task_id: str
    state: str
    parts: tuple[Part, ...]
    artifacts: tuple[Artifact, ...]
    spent_usd: Decimal
    cost: CostNode | None
    error_code: str = ""
    error_message: str = ""
    receipts: tuple[str, ...] = ()  # the peer's signed receipts, its own first
    # Where the peer's task is (a follow-up answer goes there); its status message (the
    # question, when it waits on its caller) and the agent down the path that asked it.
    peer_task: PeerTask | None = None
    status_message: str = ""
    asked_by: str = ""

    @property
    def waiting(self) -> bool:
        """The peer's task waits on its caller (``input-required``, ``auth-required``)."""
        return self.state in (TaskState.INPUT_REQUIRED.value, TaskState.AUTH_REQUIRED.value)

    @property
    def text(self) -> str:
        return "\n".join(p.text for p in self.parts if p.text is not None)


@dataclass(frozen=True, slots=True)
class PlanResult:
    """What ``ctx.plan`` returns: the model's answer and what the plan did."""

    text: str  # the model's answer (all the text it produced, in order)
    steps: int  # model calls made
    tool_calls: tuple[str, ...]  # what each tool call ran: a skill id, or peer[/skill]
    spent_usd: Decimal  # the model calls' cost (the tools' costs are charged as theirs)


class Host(Protocol):
    """What the engine gives a running skill; ``SkillContext`` wraps it for skill code."""

    async def progress(self, message: str) -> None: ...
    async def artifact(self, artifact: Artifact, *, append: bool = False,
                       last_chunk: bool = True) -> None: ...
    async def request_input(self, prompt: str, *, auth: bool = False) -> FollowUp: ...
    def budget_left(self) -> Decimal: ...
    async def route(self, text: str) -> Ranking: ...
    async def plan(self, text: str, *, stream: bool = False) -> PlanResult: ...
    async def delegate(
        self, *, capabilities: Sequence[str], task: str, input: dict[str, Any] | None,
        peer: str | None,
    ) -> DelegationResult: ...
    async def workspace_get(self, key: str) -> Any: ...
    async def workspace_put(self, key: str, value: Any) -> None: ...


@dataclass
class SkillContext:
    """Everything a skill may read or do. Only this class is the public API."""

    task_id: str
    context_id: str
    skill_id: str
    text: str
    input: dict[str, Any]
    parts: tuple[Part, ...]
    caller: str
    chain: tuple[str, ...]
    trace_id: str
    _host: Host = field(repr=False)
    _artifact_seq: int = field(default=0, repr=False)
    message: Message | None = None  # the caller's A2A message (None on Butler /v2)

    @property
    def message_id(self) -> str:
        return self.message.message_id if self.message is not None else ""

    @property
    def metadata(self) -> dict[str, Any]:
        """The caller's message metadata (``{}`` when there is none)."""
        return dict(self.message.metadata or {}) if self.message is not None else {}

    @property
    def extensions(self) -> tuple[str, ...]:
        """The A2A extension URIs the caller's message declared."""
        return self.message.extensions if self.message is not None else ()

    @property
    def reference_task_ids(self) -> tuple[str, ...]:
        return self.message.reference_task_ids if self.message is not None else ()

    async def progress(self, message: str) -> None:
        """Report progress: subscribers see a ``working`` status with this message."""
        await self._host.progress(message)

    async def emit_artifact(
        self, parts: Sequence[Part] | str, *, name: str = "", description: str = "",
        artifact_id: str = "", append: bool = False, last_chunk: bool = True,
    ) -> Artifact:
        """Publish an artifact now. To stream one in chunks, give it a stable
        ``artifact_id``: the first chunk with ``append=False``, the next ones with
        ``append=True``, the last with ``last_chunk=True`` (A2A ``append``/``lastChunk``);
        the task keeps the whole artifact."""
        if not artifact_id:
            self._artifact_seq += 1
            artifact_id = f"{self.task_id}-a{self._artifact_seq}"
        items = (Part(text=parts),) if isinstance(parts, str) else tuple(parts)
        artifact = Artifact(artifact_id=artifact_id, parts=items, name=name,
                            description=description)
        await self._host.artifact(artifact, append=append, last_chunk=last_chunk)
        return artifact

    async def request_input(self, prompt: str) -> FollowUp:
        """Pause in ``input-required`` until the caller answers; returns the answer."""
        return await self._host.request_input(prompt)

    async def request_auth(self, prompt: str) -> FollowUp:
        """Pause in ``auth-required`` (the caller must authorise something, out of band or
        in its next message) until the caller sends a follow-up; returns it."""
        return await self._host.request_input(prompt, auth=True)

    def reject(self, reason: str) -> NoReturn:
        raise SkillRejected(reason)

    def fail(self, code: str, message: str) -> NoReturn:
        raise SkillFailed(code, message)

    @property
    def budget_left(self) -> Decimal:
        return self._host.budget_left()

    async def route(self, text: str) -> Ranking:
        """Rank this instance's skills and its peers for ``text`` with the intent router,
        as this task's caller sees them; nothing runs. ``ranking.best`` is the choice
        (None below the threshold), ``butler.routing.explain(ranking)`` says why."""
        return await self._host.route(text)

    async def plan(self, text: str, *, stream: bool = False) -> PlanResult:
        """Plan ``text`` with the LLM planner (the config's ``planner:``): the model calls
        the skills and peers this task's caller may use, as tools, then answers. Paid
        from this task's budget and bounded by its deadline; fails the task with
        ``planner_unavailable``, ``planner_bad_response``, ``budget_exhausted``... when
        uncaught. ``stream``: relay the model's text to this task's ``answer`` artifact
        as it arrives."""
        return await self._host.plan(text, stream=stream)

    async def delegate(
        self,
        *,
        capabilities: Sequence[str] = (),
        task: str = "",
        input: dict[str, Any] | None = None,
        peer: str | None = None,
    ) -> DelegationResult:
        """Hand part of the work to a peer; the swarm envelope is carried for you."""
        return await self._host.delegate(
            capabilities=capabilities, task=task, input=input, peer=peer
        )

    async def workspace_get(self, key: str) -> Any:
        """The value this delegation tree's skills stored under ``key``, or None."""
        return await self._host.workspace_get(key)

    async def workspace_put(self, key: str, value: Any) -> None:
        await self._host.workspace_put(key, value)


SkillOutput = str | dict[str, Any] | list[Part] | tuple[Part, ...] | SkillResult | None
SkillFunction = Callable[[SkillContext], Awaitable[SkillOutput]]


def to_result(output: SkillOutput) -> SkillResult:
    if output is None:
        return SkillResult()
    if isinstance(output, SkillResult):
        return output
    if isinstance(output, str):
        return SkillResult(parts=(Part(text=output),))
    if isinstance(output, dict):
        return SkillResult(parts=(Part(data=output),))
    if all(isinstance(p, Part) for p in output):
        return SkillResult(parts=tuple(output))
    raise SkillFailed("invalid_skill_output", "skill returned something that is not a result")
