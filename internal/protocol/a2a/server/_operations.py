"""A2A semantics over the engine, shared by every A2A binding and wire version.

Message-to-task mapping, follow-ups, the skill chosen from a message, blocking versus
return-immediately, streams that begin with the task and end at a terminal or
interrupted state. The bindings only decode, call these, and encode.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from typing import Any

from internal.protocol.a2a.codec import swarm_envelope
from internal.protocol.a2a.codec.proto3 import bad
from internal.protocol.a2a.model import (
    PROTOCOL_VERSION,
    CardInfo,
    Envelope,
    Identity,
    ListQuery,
    Message,
    Part,
    PushConfig,
    RequestError,
    SendParams,
    StateConflict,
    Task,
    TaskEvent,
    TaskPage,
    TaskRequest,
    interrupted_or_terminal,
    reply_message,
    requested_version,
    task_artifacts,
    version_matches,
)
from internal.protocol.a2a.server._service import PushService, TaskService

CardSource = Callable[[Identity | None], CardInfo]


def unsupported(message: str) -> RequestError:
    return RequestError("unsupported_operation", message)


def check_version(headers: Mapping[str, str]) -> None:
    """HTTP+JSON and gRPC speak A2A 1.0 only (JSON-RPC picks a dialect instead)."""
    asked = requested_version(headers)
    if not version_matches(asked, PROTOCOL_VERSION):
        raise RequestError("version_not_supported",
                           f"this binding speaks A2A {PROTOCOL_VERSION}, the request asks "
                           f"for A2A-Version {asked!r} (no header means 0.3)")


def _control(data: dict[str, Any]) -> str | None:
    """``{"skill": id, "input": {...}}`` or ``{"capabilities": [...], "input": {...}}``."""
    keys = set(data)
    if "skill" in data and keys <= {"skill", "input"} and isinstance(data["skill"], str):
        return "skill"
    if "capabilities" in data and keys <= {"capabilities", "input"}:
        return "capabilities"
    return None


def to_request(message: Message, *, blocking: bool) -> TaskRequest:
    """The engine's request for an A2A message (docs/protocol.md, choosing the skill)."""
    texts: list[str] = []
    parts: list[Part] = []
    skill: str | None = None
    caps: tuple[str, ...] = ()
    input_: dict[str, Any] = {}
    for part in message.parts:
        control = _control(part.data) if part.data is not None else None
        if part.text is not None:
            texts.append(part.text)
        elif control is None or skill is not None or caps:
            parts.append(part)
        else:
            data = part.data or {}
            if control == "skill":
                skill = str(data["skill"])
            else:
                value = data["capabilities"]
                if not isinstance(value, list) or not value or not all(
                        isinstance(c, str) for c in value):
                    raise bad("capabilities must be a non-empty list of strings")
                caps = tuple(value)
            raw_input = data.get("input", {})
            if not isinstance(raw_input, dict):
                raise bad(f"the {control} part's input must be an object")
            input_ = raw_input
    named = (message.metadata or {}).get("skill")
    if skill is None and not caps and isinstance(named, str) and named:
        skill = named
    return TaskRequest(text="\n".join(texts), context_id=message.context_id or None,
                       input=input_, parts=tuple(parts), capabilities_needed=caps,
                       skill=skill, blocking=blocking, message=message)


async def encoded_events(encode: Callable[[TaskEvent], dict[str, Any]],
                         events: AsyncIterator[TaskEvent]) -> AsyncIterator[dict[str, Any]]:
    """A binding's stream: each event in its wire's shape; closing it closes ``events``."""
    try:
        async for event in events:
            yield encode(event)
    finally:
        await events.aclose()  # type: ignore[attr-defined]


def envelope_of(params: SendParams, headers: Mapping[str, str]) -> Envelope:
    """The swarm envelope from the message's (or the request's) metadata and headers."""
    metadata = params.message.metadata
    if not (metadata and swarm_envelope.SWARM_EXTENSION_URI in metadata):
        metadata = params.metadata
    return swarm_envelope.decode_a2a_envelope(metadata, headers)


class A2AOperations:
    def __init__(self, service: TaskService, push: PushService | None, card: CardSource,
                 tenant: str = "") -> None:
        """``tenant``: the one A2A 1.0 tenant this agent is, the path segment it is served
        under when a daemon hosts several ("": the daemon's own agent, at ``/``)."""
        self.service = service
        self.push = push
        self.card = card
        self.tenant = tenant

    def check_tenant(self, request: Mapping[str, Any]) -> None:
        """A request's ``tenant`` names the agent at this URL, or is left out: one agent
        cannot take another's requests (each checks its own callers' tokens)."""
        asked = request.get("tenant")
        if asked is None or asked == "" or asked == self.tenant:
            return
        if not isinstance(asked, str):
            raise bad("tenant must be a string")
        where = f"tenant {self.tenant!r}" if self.tenant else "the daemon's own agent"
        raise RequestError("not_found", f"tenant {asked[:64]!r} is not served at this URL "
                           f"({where} is); a hosted agent is served under /{{tenant}}/")

    def _pushes(self) -> PushService:
        if self.push is None or not self.push.enabled:
            raise RequestError("push_notification_not_supported",
                               "push notifications are turned off on this agent")
        return self.push

    async def _start(self, caller: Identity, params: SendParams, envelope: Envelope,
                     *, blocking: bool) -> Task:
        """Submit or resume; a push config given with the message sees every update."""
        message, push = params.message, params.push
        if push is not None:
            await self._pushes().validate(push)
        if message.task_id:
            return await self._follow_up(caller, message, blocking=blocking, push=push)
        task = await self.service.submit(caller, to_request(message, blocking=blocking),
                                         envelope)
        if push is not None:  # the task has not started running yet: nothing awaited since
            await self._pushes().create(caller, replace(push, task_id=task.id))
        return task

    async def _follow_up(self, caller: Identity, message: Message, *, blocking: bool,
                         push: PushConfig | None) -> Task:
        task = await self.service.get(caller, message.task_id)
        if message.context_id and message.context_id != task.context_id:
            raise bad(f"contextId {message.context_id!r} does not match the context "
                      f"{task.context_id!r} of task {task.wire_id}")
        if task.state.terminal:
            raise unsupported(f"task {task.wire_id} is {task.state.value}: it takes no more "
                              "messages; send a new message without taskId")
        if not task.state.interrupted:  # input-required or auth-required
            raise unsupported(f"task {task.wire_id} is {task.state.value}, not waiting for input")
        reply = to_request(replace(message, context_id=task.context_id), blocking=blocking)
        if push is not None:
            await self._pushes().create(caller, replace(push, task_id=task.id))
        try:
            return await self.service.answer(caller, task.id, reply)
        except StateConflict as err:
            if err.code in ("task_terminal", "task_not_waiting"):
                raise unsupported(err.message) from None
            raise

    async def send(self, caller: Identity, params: SendParams, envelope: Envelope) -> Task:
        blocking = not params.return_immediately
        task = await self._start(caller, params, envelope,
                                 blocking=blocking and params.push is None)
        if blocking and params.push is not None and not interrupted_or_terminal(task.state):
            async for event in self._follow(caller, task.id):
                task = event.task
        return task

    async def send_stream(self, caller: Identity, params: SendParams,
                          envelope: Envelope) -> AsyncIterator[TaskEvent]:
        task = await self._start(caller, params, envelope, blocking=False)
        async for event in self._follow(caller, task.id):
            yield event

    async def subscribe(self, caller: Identity, task_id: str) -> AsyncIterator[TaskEvent]:
        task = await self.service.get(caller, task_id)
        if task.state.terminal:
            raise unsupported(f"task {task_id} is {task.state.value}: there is nothing to "
                              "subscribe to; read it with GetTask")
        async for event in self._follow(caller, task_id, through_interruptions=True):
            yield event

    async def _follow(self, caller: Identity, task_id: str, *,
                      through_interruptions: bool = False) -> AsyncIterator[TaskEvent]:
        """The task first, then its updates, until it ends or (for a send, not for a
        subscription: A2A 3.1.6) waits on its caller.

        Artifacts the final state adds (a returned artifact, the result) are sent as
        artifact updates before that state, so a stream reader misses nothing.
        """
        seen: set[str] | None = None
        async for event in self.service.events(caller, task_id):
            if seen is None and reply_message(event.task) is not None:
                yield replace(event, kind="message")  # a message reply is the whole stream
                return
            if seen is None:
                seen = {a.artifact_id for a in task_artifacts(event.task)}
                yield replace(event, kind="task")
            elif event.kind == "artifact" and event.artifact is not None:
                if event.append or event.artifact.artifact_id not in seen:
                    seen.add(event.artifact.artifact_id)
                    yield event
                continue
            else:
                for artifact in task_artifacts(event.task):
                    if artifact.artifact_id not in seen:
                        seen.add(artifact.artifact_id)
                        yield TaskEvent(event.task, "artifact", artifact)
                yield event
            if event.task.state.terminal or (
                    not through_interruptions and interrupted_or_terminal(event.task.state)):
                return

    async def get(self, caller: Identity, task_id: str) -> Task:
        return await self.service.get(caller, task_id)

    async def cancel(self, caller: Identity, task_id: str) -> Task:
        return await self.service.cancel(caller, task_id)

    async def list_tasks(self, caller: Identity, query: ListQuery) -> TaskPage:
        return await self.service.list_tasks(
            caller, state=query.state, context_id=query.context_id, cursor=query.page_token,
            limit=query.page_size, updated_after=query.updated_after, by_update=True)

    async def create_push(self, caller: Identity, config: PushConfig) -> PushConfig:
        push = self._pushes()
        await push.validate(config)
        return await push.create(caller, config)

    async def get_push(self, caller: Identity, task_id: str, config_id: str) -> PushConfig:
        return await self._pushes().get(caller, task_id, config_id)

    async def list_push(self, caller: Identity, task_id: str) -> list[PushConfig]:
        return await self._pushes().list_configs(caller, task_id)

    async def delete_push(self, caller: Identity, task_id: str, config_id: str) -> None:
        await self._pushes().delete(caller, task_id, config_id)
