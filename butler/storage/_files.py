"""Private files: a database, its folder and every other file Butler keeps in it are
readable by their owner only.

SQLite creates a database's ``-wal`` and ``-shm`` files with the mode of the database file,
so creating that file 0600 before SQLite opens it keeps all three private; files left
readable by an older version (or by hand) are tightened on every open.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FOLDER_MODE = 0o700
FILE_MODE = 0o600
COMPANIONS = ("-wal", "-shm", "-journal")


def private_folder(folder: Path, *, tighten: bool = True) -> None:
    """Create ``folder`` 0700; with ``tighten``, also take group and other access from an
    existing one (a data folder is Butler's own; a folder an operator chose for a
    registry file may be shared, so that caller creates it private but leaves it be)."""
    folder.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    if tighten and stat.S_IMODE(folder.stat().st_mode) & 0o077:
        folder.chmod(FOLDER_MODE)


def private_file(path: Path) -> None:
    """Create the database file 0600 if missing; make it and its companions 0600."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, FILE_MODE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    for suffix in COMPANIONS:
        companion = path.with_name(path.name + suffix)
        try:
            if stat.S_IMODE(companion.stat().st_mode) != FILE_MODE:
                companion.chmod(FILE_MODE)
        except FileNotFoundError:
            continue


def replace_private(path: Path, data: bytes) -> None:
    """Make ``path`` 0600 with ``data``, whole or not at all: a new file beside the old,
    renamed over it."""
    staged = path.with_name(path.name + ".new")
    staged.unlink(missing_ok=True)
    write_private(staged, data)
    os.replace(staged, path)


def write_private(path: Path, data: bytes) -> None:
    """Create ``path`` 0600 with ``data``; ``FileExistsError`` if it exists. Not fsynced:
    what it guards against is the end of this process, which the page cache survives."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
