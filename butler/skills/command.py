"""The command bridge: a CLI tool as a skill (task JSON on stdin, stdout is the result)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import signal
from collections.abc import Collection, Sequence

from butler.runtime.children import die_with_parent
from butler.skills.base import SkillContext, SkillFailed, SkillFunction, SkillOutput, SkillResult
from butler.skills.child_env import child_environment
from butler.skills.fidelity import Fidelity
from butler.skills.process_group import group_gone, group_running, signal_group
from butler.skills.run_ledger import RUN_ID_ENV, RunLedger, RunRecord
from internal.protocol.a2a.codec import butler_v2, exact_json
from internal.protocol.a2a.model import Part

log = logging.getLogger("butler.skills")

STDERR_TAIL = 2000
TERM_GRACE_SECONDS = 2.0  # after SIGTERM, for a command to clean up before SIGKILL
KILL_SECONDS = 3.0  # after SIGKILL; within the engine's 5 s wait for cancelled runs
# What a one-shot process (JSON in, result out) cannot carry of the skill API.
FIDELITY = Fidelity("adapted", (
    "no streaming: output arrives at the end",
    "cancellation ends the process group",
    "no input-required",
))


def command_skill(argv: Sequence[str], *, max_output_bytes: int,
                  runs: RunLedger, secret_env: Collection[str]) -> SkillFunction:
    async def run(ctx: SkillContext) -> SkillOutput:
        payload = exact_json.dumps_bytes({
            "task_id": ctx.task_id, "context_id": ctx.context_id, "skill": ctx.skill_id,
            "task": ctx.text, "input": ctx.input,
            "parts": [butler_v2.encode_part(p) for p in ctx.parts],
            "caller": ctx.caller, "trace_id": ctx.trace_id,
        })
        run_id = secrets.token_hex(8)
        try:
            # A session of its own: the command and all it starts are one process group.
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True,
                preexec_fn=die_with_parent,
                env=child_environment(secret_env, **{RUN_ID_ENV: run_id}),
            )
        except OSError as exc:
            raise SkillFailed("command_failed", f"cannot start {argv[0]}: {exc.strerror}") from None
        record = None
        try:
            try:
                record = runs.started(run_id, proc.pid, ctx.task_id)
            except OSError as exc:
                raise SkillFailed("command_failed",
                                  f"cannot record the run of {argv[0]}: {exc.strerror}") from None
            stdout, stderr = await _communicate(proc, payload, max_output_bytes)
        finally:
            # Cancellation, timeout, output cap, or processes the command left behind in
            # its group: nothing of the run outlives its task.
            await asyncio.shield(_end_run(proc, runs, record))
        if proc.returncode != 0:
            tail = stderr[-STDERR_TAIL:].decode("utf-8", "replace").strip()
            raise SkillFailed(
                "command_failed", f"{argv[0]} exited with {proc.returncode}: {tail}"
            )
        return _parse(stdout)

    return run


async def _communicate(
    proc: asyncio.subprocess.Process, payload: bytes, cap: int
) -> tuple[bytes, bytes]:
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin = proc.stdin

    async def feed() -> None:
        # Concurrent with reading stdout: a command may write before it reads all its input.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(payload)
            await stdin.drain()
        stdin.close()

    async def read_capped(stream: asyncio.StreamReader, limit: int) -> bytes:
        chunks, size = [], 0
        while chunk := await stream.read(65536):
            size += len(chunk)
            if size > limit:
                raise SkillFailed("output_too_large", f"command wrote more than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def read_tail(stream: asyncio.StreamReader) -> bytes:
        tail = b""
        while chunk := await stream.read(65536):
            tail = (tail + chunk)[-STDERR_TAIL * 4:]
        return tail

    feeder, tail = asyncio.create_task(feed()), asyncio.create_task(read_tail(proc.stderr))
    try:
        out = await read_capped(proc.stdout, cap)
        await feeder
        err = await tail
    finally:
        # Never leave a helper reading a stream that ``_reap`` is about to drain.
        feeder.cancel()
        tail.cancel()
        await asyncio.wait((feeder, tail))
    await proc.wait()
    return out, err


async def _end_run(proc: asyncio.subprocess.Process, runs: RunLedger,
                   record: RunRecord | None) -> None:
    """End what is left of the run's process group and forget its record once the group
    is gone (a group that would not end is left to the next start-up, record and all)."""
    pgid = proc.pid
    try:
        gone = (proc.returncode is not None and not group_running(pgid)) \
            or await _end_group(proc)
    except Exception:  # never in place of the run's own outcome
        log.exception("could not end process group %d", pgid)
        return
    if record is None:
        return
    if not gone:
        log.warning("process group %d of task %s did not end after SIGKILL", pgid,
                    record.task_id)
        return
    try:
        runs.finished(record)
    except OSError as exc:
        log.warning("could not remove the record of process group %d: %s", pgid, exc.strerror)


async def _end_group(proc: asyncio.subprocess.Process) -> bool:
    """SIGTERM to the whole group, SIGKILL to what is left after a grace; True when it is
    gone. The leader is reaped, and its pipes drained first: a pipe whose reader was
    paused (a full buffer, after the output cap) would never see its end otherwise."""
    for sig, seconds in ((signal.SIGTERM, TERM_GRACE_SECONDS), (signal.SIGKILL, KILL_SECONDS)):
        signal_group(proc.pid, sig)
        try:
            async with asyncio.timeout(seconds):
                await _reap(proc)
                await group_gone(proc.pid)
        except TimeoutError:
            continue
        return True
    return False


async def _reap(proc: asyncio.subprocess.Process) -> None:
    if proc.stdin is not None:
        proc.stdin.close()
    for stream in (proc.stdout, proc.stderr):
        while stream is not None and await stream.read(65536):
            pass
    await proc.wait()


def _parse(stdout: bytes) -> SkillOutput:
    """JSON output ``{"parts": [...]}`` or any JSON object becomes data; else text."""
    text = stdout.decode("utf-8", "replace")
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError:
            return text.rstrip("\n")
        if isinstance(data, dict) and isinstance(data.get("parts"), list):
            try:
                return SkillResult(parts=butler_v2.decode_parts(data["parts"]))
            except Exception:
                raise SkillFailed("invalid_skill_output", "command printed invalid parts") from None
        return SkillResult(parts=(Part(data=data),)) if isinstance(data, dict) else text
    return text.rstrip("\n")
