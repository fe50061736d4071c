"""A command skill's process group: who its processes are, and how the group is ended.

Each command runs as the leader of a session (and process group) of its own, so the
processes it starts in the background stay in its group and end with it. A pid names a
process only while that process lives: the kernel may give the number to another one
later. The boot id and the start time in ``/proc/PID/stat`` (clock ticks since boot) tell
the process that had it from any later one; both are Linux's, and elsewhere they are
``None`` (and nothing is ever signalled on their strength).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
BOOT_ID = PROC / "sys/kernel/random/boot_id"
# An event loop cannot await the end of processes that are not its children: the
# members left once the leader is reaped are polled, at this interval.
POLL_SECONDS = 0.02


def boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class ProcStat:
    state: str  # R, S, D, Z...: a zombie (Z) or dead (X) process runs no more code
    pgrp: int
    start_time: int  # clock ticks after boot

    @property
    def running(self) -> bool:
        return self.state not in ("Z", "X")


def proc_stat(pid: int) -> ProcStat | None:
    """``None`` when there is no such process (or no ``/proc``)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces and ")".
    fields = text.rpartition(")")[2].split()
    return ProcStat(state=fields[0], pgrp=int(fields[2]), start_time=int(fields[19]))


def members(pgid: int) -> list[int]:
    """The running (not zombie) processes in group ``pgid``."""
    try:
        pids = [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return []
    found = []
    for pid in pids:
        stat = proc_stat(pid)
        if stat is not None and stat.pgrp == pgid and stat.running:
            found.append(pid)
    return found


def carries(pid: int, name: str, value: str) -> bool:
    """Whether ``pid`` was started with ``name=value`` in its environment (readable for
    processes of the same user only; ``False`` for any other)."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{name}={value}".encode() in environ.split(b"\0")


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_running(pgid: int) -> bool:
    """Whether a process of the group still runs. Zombies do not count: their parent
    reaps them, or nobody does (a PID 1 that does not reap, in a container)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member that is not ours: it is there all the same
        return True
    # Only when the group outlived its leader: the scan of /proc costs more.
    return not PROC.is_dir() or bool(members(pgid))


async def group_gone(pgid: int) -> None:
    # A scan of /proc, on a thread: the loop serves others meanwhile.
    while await asyncio.to_thread(group_running, pgid):  # noqa: ASYNC110 -- no event tells of a non-child's end
        await asyncio.sleep(POLL_SECONDS)
