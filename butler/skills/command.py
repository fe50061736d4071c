"""The command bridge: a CLI tool as a skill (task JSON on stdin, stdout is the result)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import sys
from collections.abc import Sequence

from butler.skills.base import SkillContext, SkillFailed, SkillFunction, SkillOutput, SkillResult
from internal.protocol.a2a.codec import butler_v2, exact_json
from internal.protocol.a2a.model import Part

STDERR_TAIL = 2000


def command_skill(argv: Sequence[str], *, max_output_bytes: int) -> SkillFunction:
    async def run(ctx: SkillContext) -> SkillOutput:
        payload = exact_json.dumps_bytes({
            "task_id": ctx.task_id, "context_id": ctx.context_id, "skill": ctx.skill_id,
            "task": ctx.text, "input": ctx.input,
            "parts": [butler_v2.encode_part(p) for p in ctx.parts],
            "caller": ctx.caller, "trace_id": ctx.trace_id,
        })
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            raise SkillFailed("command_failed", f"cannot start {argv[0]}: {exc.strerror}") from None
        try:
            stdout, stderr = await _communicate(proc, payload, max_output_bytes)
        except BaseException:
            # Cancellation, timeout or output cap: the process must not outlive its task.
            _kill(proc)
            with contextlib.suppress(Exception):
                await asyncio.shield(_reap(proc))
            raise
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


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Wait for a killed process. Its pipes are drained first: a pipe whose reader was
    paused (a full buffer, after the output cap) would never see its end otherwise."""
    async with asyncio.timeout(5):
        if proc.stdin is not None:
            proc.stdin.close()
        for stream in (proc.stdout, proc.stderr):
            while stream is not None and await stream.read(65536):
                pass
        await proc.wait()


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent() -> None:
    """In the child, before exec: on Linux the kernel sends it SIGKILL when the daemon
    dies, even by SIGKILL, so a command skill never outlives its daemon. Elsewhere it
    runs on until its own end (the daemon kills its group on any orderly stop)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


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
