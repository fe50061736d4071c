"""Per-delegation-tree workspace: key/values the local skills of one tree share.

A workspace is named by the run (``TaskRun.workspace_key``): the tree id the delegation
carries (or a new one where the tree begins) and the authenticated caller, so no caller
reaches another's by choosing ids (docs/delegation.md#workspace).
Entries older than ``swarm.workspace_ttl_hours`` are purged periodically. Every SQLite call
runs on the workspace database's worker (``butler.storage``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Protocol

from butler.skills.base import SkillFailed
from butler.storage import Database
from internal.protocol.a2a.model import TaskFailed

MAX_VALUE_BYTES = 256 * 1024
MAX_KEYS_PER_TREE = 1000


class WorkspaceError(TaskFailed, ValueError):
    """A skill's workspace write is refused (bad key, value or size); its task may go on."""

    def __init__(self, message: str) -> None:
        super().__init__("workspace_error", message)


def _create_schema(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS workspace (tree TEXT NOT NULL, key TEXT NOT NULL, "
        "value TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (tree, key))"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS workspace_age ON workspace(created_at)")


class Workspace(Protocol):
    async def get(self, tree: str, key: str) -> Any: ...
    async def put(self, tree: str, key: str, value: Any) -> None: ...


class NoWorkspace:
    """An instance without a workspace: reads find nothing, writes fail the skill."""

    async def get(self, tree: str, key: str) -> Any:
        return None

    async def put(self, tree: str, key: str, value: Any) -> None:
        raise SkillFailed("workspace_unavailable", "this instance has no workspace")


class SqliteWorkspace:
    """``await SqliteWorkspace.open(path, ttl_hours)``."""

    def __init__(self, db: Database, ttl_hours: float) -> None:
        self._db = db
        self.ttl_seconds = ttl_hours * 3600

    @classmethod
    async def open(cls, path: Path, ttl_hours: float) -> SqliteWorkspace:
        return cls(await Database.open(path, name="workspace", setup=_create_schema),
                   ttl_hours)

    async def get(self, tree: str, key: str) -> Any:
        row = await self._db.fetchone(
            "SELECT value FROM workspace WHERE tree=? AND key=? AND created_at>=?",
            (tree, key, time.time() - self.ttl_seconds))
        return json.loads(row[0]) if row else None

    async def put(self, tree: str, key: str, value: Any) -> None:
        if not key or len(key) > 200:
            raise WorkspaceError("workspace keys are 1-200 characters")
        try:
            text = json.dumps(value, default=str)
        except (TypeError, ValueError) as exc:
            raise WorkspaceError(f"workspace values must be JSON: {exc}") from None
        if len(text.encode()) > MAX_VALUE_BYTES:
            raise WorkspaceError(f"workspace values are at most {MAX_VALUE_BYTES} bytes")
        await self._db.transaction(_put, tree, key, text, time.time())

    async def purge(self, now: float | None = None) -> int:
        cutoff = (now if now is not None else time.time()) - self.ttl_seconds
        return await self._db.execute("DELETE FROM workspace WHERE created_at<?", (cutoff,))

    async def close(self) -> None:
        await self._db.close()


def _put(conn: sqlite3.Connection, tree: str, key: str, text: str, now: float) -> None:
    count = conn.execute("SELECT COUNT(*) FROM workspace WHERE tree=?", (tree,)).fetchone()[0]
    if count >= MAX_KEYS_PER_TREE:
        raise WorkspaceError(f"a workspace holds at most {MAX_KEYS_PER_TREE} keys")
    conn.execute(
        "INSERT INTO workspace(tree, key, value, created_at) VALUES (?,?,?,?) "
        "ON CONFLICT(tree, key) DO UPDATE SET value=excluded.value",
        (tree, key, text, now),
    )
