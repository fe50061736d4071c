"""Cancels sent down to peers. A delegation that stops following a task its peer still runs
(the local task was canceled by its caller, ran out of time or budget, the daemon is
stopping, or the call failed after the peer had named its task) sends the peer its own
cancel, on the binding the task runs on (``A2AClient.cancel``: Butler /v2, ``CancelTask``,
``tasks/cancel``, HTTP+JSON ``:cancel``, gRPC ``CancelTask``), through the same client,
guard and token as the delegation.

Each cancel is a background job, so the local task ends at once whatever the peer does;
it is bounded (``CANCEL_SECONDS``), ends with one ``delegation_canceled`` audit record
saying what the peer answered, and ``aclose`` (at shutdown) waits for the jobs still
running, within the same bound. A Butler peer's own delegations end the same way when its
task is canceled, so a cancel goes down the whole chain. docs/delegation.md#cancel
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from internal.protocol.a2a.client import A2AClient, PeerUpdate
from internal.protocol.a2a.model import ButlerError, DelegationFailed, PeerTask, Task

log = logging.getLogger("butler.delegation")
# How long a cancel may take, and how long a stop waits for the cancels still on their way.
CANCEL_SECONDS = 5.0
# A Butler peer is sent the task under an id chosen here; a cancel that overtakes the task
# itself finds no such task yet, and is sent again after this pause (doubled each time).
NOT_YET_SECONDS = 0.05


class Followed:
    """What a delegation has seen of its peer's task so far (``seen``, its client's watch
    feeds it): what a cancel needs."""

    __slots__ = ("update",)

    def __init__(self) -> None:
        self.update: PeerUpdate | None = None

    def seen(self, update: PeerUpdate) -> None:
        self.update = update

    @property
    def running(self) -> bool:
        """Reported by the peer and not ended (waiting on its caller counts as running)."""
        found = self.update
        return found is not None and found.reported and not found.task.state.terminal

    @property
    def maybe_running(self) -> bool:
        """Running, or sent under a known id and not yet answered for (a Butler's)."""
        found = self.update
        return found is not None and not (found.reported and found.task.state.terminal)


class PeerCancels:
    def __init__(self, audit: Callable[..., None]) -> None:
        self._audit = audit
        self._jobs: set[asyncio.Task[None]] = set()
        # The peers' tasks delegations follow now (the operator's view of them).
        self.followed: set[Followed] = set()

    def __len__(self) -> int:
        return len(self._jobs)

    @contextlib.contextmanager
    def following(self, client: A2AClient, followed: Followed, *, seconds: float,
                  record: Mapping[str, Any]) -> Iterator[None]:
        """Around a call that follows a peer's task (told to ``followed`` as it goes):
        when it ends by an exception while the peer's task still runs, that task is
        canceled. When this side stopped waiting (canceled, or out of time) the task may
        run without the peer having said so yet (a Butler's, sent under a known id): it is
        canceled too. ``record``: the fields of the delegation's audit records."""
        self.followed.add(followed)
        try:
            yield
        except BaseException as exc:
            gave_up = isinstance(exc, asyncio.CancelledError | TimeoutError) or (
                isinstance(exc, DelegationFailed) and exc.code == "peer_timeout")
            if followed.update is not None and (
                    followed.running or (gave_up and followed.maybe_running)):
                self.send(client, followed.update.ref, seconds=seconds, record=record)
            raise
        finally:
            self.followed.discard(followed)

    def send(self, client: A2AClient, peer_task: PeerTask, *, seconds: float,
             record: Mapping[str, Any]) -> None:
        """Cancel ``peer_task`` in the background, within ``seconds``."""
        job = asyncio.create_task(self._cancel(client, peer_task, min(seconds, CANCEL_SECONDS),
                                               record),
                                  name=f"peer-cancel-{peer_task.task_id}")
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    async def _cancel(self, client: A2AClient, peer_task: PeerTask, seconds: float,
                      record: Mapping[str, Any]) -> None:
        started = time.monotonic()
        decision, code, why = "error", None, ""
        try:
            async with asyncio.timeout(seconds):
                answer = await _ask(client, peer_task, started + seconds)
            decision = answer.state.value
        except ButlerError as err:
            code, why = err.code, err.message
        except TimeoutError:
            code, why = "peer_timeout", f"{client.name} did not answer the cancel in {seconds:g} s"
        except Exception as exc:  # a cancel must never take anything else down
            code, why = "peer_error", f"{client.name}: {type(exc).__name__}"
            log.exception("cancel of task %s on %s", peer_task.task_id, client.name)
        took = f"{time.monotonic() - started:.6f}"
        if code is not None:
            log.warning("could not cancel task %s on %s: %s: %s", peer_task.task_id,
                        client.name, code, why)
        else:
            log.info("task %s on %s: %s after the cancel", peer_task.task_id, client.name,
                     decision)
        detail = {**record.get("detail", {}), "peer_task_id": peer_task.task_id,
                  "binding": peer_task.binding, "seconds": took}
        self._audit("delegation_canceled", **{**record, "detail": detail},
                    budget_before=None, budget_after=None, decision=decision, code=code)

    async def aclose(self, seconds: float = CANCEL_SECONDS + 1) -> None:
        """Wait for the cancels on their way (each ends within ``CANCEL_SECONDS``, with its
        record), at most ``seconds``, then stop what is left."""
        jobs = list(self._jobs)
        if not jobs:
            return
        _, pending = await asyncio.wait(jobs, timeout=seconds)
        for job in pending:
            job.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


async def _ask(client: A2AClient, peer_task: PeerTask, deadline: float) -> Task:
    pause = NOT_YET_SECONDS
    while True:
        try:
            return await client.cancel(peer_task, deadline)
        except ButlerError as err:
            if err.code != "task_not_found" or time.monotonic() + pause >= deadline:
                raise
        await asyncio.sleep(pause)
        pause *= 2
