"""Schema versions: each database records its schema in ``PRAGMA user_version`` and its
store migrates an older file in place on open (docs/operations.md#data-files)."""

from __future__ import annotations

import sqlite3


def schema_version(conn: sqlite3.Connection, name: str, current: int) -> int:
    """The file's schema version; a file written by a newer Butler is refused, as this
    one cannot know what it would lose by writing to it."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > current:
        raise RuntimeError(f"{name} database has schema {version}, newer than this "
                           f"Butler's ({current})")
    return version
