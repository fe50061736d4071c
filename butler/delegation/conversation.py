"""A delegation as a conversation: a peer's task that waits on its caller (A2A
``input-required`` or ``auth-required``) puts the delegating task in the same state, with
the peer's question and the agent that asked it; the caller's answer goes on to the
peer's task, and so on until the peer's task ends (docs/delegation.md#when-a-peer-asks).

The waiting is the local skill's own (``TaskRun.request_input``): a caller answers a
delegated task the way it answers any task waiting for input, on any binding.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from butler.skills.base import DelegationResult, FollowUp, SkillFailed
from internal.protocol.a2a.model import DelegationFailed, PeerTask

# The caller is asked the peer's question (``result``): its answer.
Ask = Callable[[DelegationResult], Awaitable[FollowUp]]
# The answer sent to the peer's task: what the peer did next.
Answer = Callable[[PeerTask, FollowUp], Awaitable[DelegationResult]]
# The peer's task waits for an answer that will not come: its cancel is sent (in the
# background; nothing if the task is no longer waiting on this side).
Abandon = Callable[[PeerTask], None]

INPUT_TIMEOUT = "input_timeout"


async def converse(result: DelegationResult, *, ask: Ask, answer: Answer, abandon: Abandon,
                   wait_seconds: float) -> DelegationResult:
    """Relay the peer's questions and the caller's answers until the peer's task no
    longer waits; each wait for an answer at most ``wait_seconds`` (a peer that asks
    forever is bounded by the task's own time limit as well). A conversation that ends
    while the peer's task waits (this task canceled, out of time, no answer in time, an
    answer refused before it was sent) cancels the peer's task: it would wait forever."""
    while result.waiting:
        peer_task = result.peer_task
        if peer_task is None:
            raise DelegationFailed("peer_error", f"{result.peer} waits on its caller, but "
                                                 "its task id is unknown")
        try:
            try:
                async with asyncio.timeout(wait_seconds):
                    followup = await ask(result)
            except TimeoutError:
                raise SkillFailed(INPUT_TIMEOUT, f"no answer to {result.asked_by or result.peer}"
                                                 f"'s question within {wait_seconds:g}s") from None
            result = await answer(peer_task, followup)
        except BaseException:
            abandon(peer_task)
            raise
    return result
