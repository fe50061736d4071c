"""The data folder, held by one process for its whole life.

An advisory lock (``fcntl.flock``) on ``butler.lock`` in the folder, taken before any
database in it is opened: a second daemon (or registry) started on the same folder stops
before it touches anything, instead of failing the first one's running tasks as
interrupted and then disagreeing with it about every task. The kernel drops the lock
when the process ends, however it ends, so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from butler.storage import FILE_MODE, private_folder
from internal.protocol.a2a.model import SetupError

LOCK_FILE = "butler.lock"


class DataFolderInUse(SetupError):
    def __init__(self, folder: Path, pid: int | None) -> None:
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__("data_folder_in_use",
                         f"data folder {folder} is in use by another butler ({holder})")
        self.pid = pid


@contextlib.contextmanager
def hold_data_folder(folder: Path, *, tighten: bool = True) -> Iterator[None]:
    """Create ``folder`` private if needed (``butler.storage.private_folder``, which with
    ``tighten`` also takes group and other access from an existing one) and hold it until
    the block ends.

    Raises ``DataFolderInUse`` when another process holds it, ``OSError`` when the folder
    or its lock file cannot be created."""
    private_folder(folder, tighten=tighten)
    # O_CLOEXEC: a command skill's child process must not inherit (and outlive with) it.
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataFolderInUse(folder, _holder(fd)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _holder(fd: int) -> int | None:
    """The pid the holder wrote; None in the instant between its lock and its write."""
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None
