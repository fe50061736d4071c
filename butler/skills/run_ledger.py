"""The command skills running now, one small file each in ``<data_dir>/runs/``, so that the
next daemon on this data folder can end what a crashed one left running.

On Linux the kernel kills a command with its daemon (``PR_SET_PDEATHSIG``), but not the
processes the command started in its group: after a ``kill -9`` they run on, re-parented
to PID 1. A file per run is the whole record: written when its command has started,
removed once its group is gone; a crash leaves it behind, and ``end_leftovers`` (called
with the data folder's lock held, before any skill can run) reads it.

A record is acted on only when it surely names the same processes (``_still_ours``): a
recycled pid is never signalled.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from butler.skills.process_group import boot_id, carries, members, proc_stat, signal_group
from butler.storage import private_folder, write_private

log = logging.getLogger("butler.skills")

RUN_ID_ENV = "BUTLER_RUN_ID"  # in every command's environment, inherited by what it starts


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: str  # random; also the value of RUN_ID_ENV in the command's environment
    pgid: int  # the command's pid, leader of its own session and group
    start_time: int | None  # the leader's, in clock ticks after boot (Linux)
    boot_id: str | None  # of the boot the command ran in (Linux)
    task_id: str
    daemon_pid: int

    @classmethod
    def decode(cls, data: Any) -> RunRecord:
        """``ValueError`` (or ``TypeError``, ``KeyError``) for anything but a record."""
        record = cls(**data)
        if not isinstance(record.pgid, int) or record.pgid <= 1:
            raise ValueError(f"pgid {record.pgid!r}")
        return record


class RunLedger:
    def __init__(self, folder: Path) -> None:
        private_folder(folder)
        self.folder = folder

    def started(self, run_id: str, pgid: int, task_id: str) -> RunRecord:
        """Record a command that has just started. Written on the event loop: a few
        hundred bytes to the page cache, which outlives the process (all this guards
        against); a crash of the machine ends the commands too."""
        stat = proc_stat(pgid)
        record = RunRecord(run_id=run_id, pgid=pgid,
                           start_time=None if stat is None else stat.start_time,
                           boot_id=boot_id(), task_id=task_id, daemon_pid=os.getpid())
        write_private(self._path(run_id), json.dumps(asdict(record)).encode())
        return record

    def finished(self, record: RunRecord) -> None:
        """Forget a run whose group is gone."""
        self._path(record.run_id).unlink(missing_ok=True)

    def end_leftovers(self) -> int:
        """SIGKILL the groups the previous daemon on this folder left running and forget
        every record; returns how many groups were ended. One warning line per group."""
        ended = 0
        for path in sorted(self.folder.glob("*.json")):
            try:
                record = RunRecord.decode(json.loads(path.read_bytes()))
            except (OSError, ValueError, TypeError, KeyError) as exc:
                log.warning("ignored an unreadable command-run record %s: %s", path.name,
                            type(exc).__name__)
            else:
                if _still_ours(record):
                    signal_group(record.pgid, signal.SIGKILL)
                    ended += 1
                    log.warning("ended process group %d of a command skill that butler pid "
                                "%d left running for task %s", record.pgid,
                                record.daemon_pid, record.task_id)
            path.unlink(missing_ok=True)
        return ended

    def _path(self, run_id: str) -> Path:
        return self.folder / f"{run_id}.json"


def _still_ours(record: RunRecord) -> bool:
    """Whether group ``record.pgid`` still holds processes of the recorded run: same boot;
    a leader, if any, with the recorded start time (else the pid is another process's, and
    the kernel never reuses a pid while a group of that id has a member, so the recorded
    group had ended); and a running member that carries the run's random id in its
    environment, which no process of another group can (a process that cleared its
    environment is not recognised, and left alone)."""
    if record.boot_id is None or record.boot_id != boot_id():
        return False  # another boot (nothing of that one runs), or nothing to check by
    leader = proc_stat(record.pgid)
    if leader is not None and leader.start_time != record.start_time:
        return False
    return any(carries(pid, RUN_ID_ENV, record.run_id) for pid in members(record.pgid))
