"""Per-delegation-tree workspace: key/values the local skills of one tree share.

A tree is identified by its trace id, which every hop of one delegation shares.
Entries older than ``swarm.workspace_ttl_hours`` are purged periodically.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from internal.protocol.a2a.model import TaskFailed

MAX_VALUE_BYTES = 256 * 1024
MAX_KEYS_PER_TREE = 1000


class WorkspaceError(TaskFailed, ValueError):
    """A skill's workspace write is refused (bad key, value or size); its task may go on."""

    def __init__(self, message: str) -> None:
        super().__init__("workspace_error", message)


class SqliteWorkspace:
    def __init__(self, path: Path, ttl_hours: float) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.ttl_seconds = ttl_hours * 3600
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS workspace (tree TEXT NOT NULL, key TEXT NOT NULL, "
            "value TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (tree, key))"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS workspace_age ON workspace(created_at)")

    def get(self, tree: str, key: str) -> Any:
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM workspace WHERE tree=? AND key=? AND created_at>=?",
                (tree, key, time.time() - self.ttl_seconds),
            ).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, tree: str, key: str, value: Any) -> None:
        if not key or len(key) > 200:
            raise WorkspaceError("workspace keys are 1-200 characters")
        try:
            text = json.dumps(value, default=str)
        except (TypeError, ValueError) as exc:
            raise WorkspaceError(f"workspace values must be JSON: {exc}") from None
        if len(text.encode()) > MAX_VALUE_BYTES:
            raise WorkspaceError(f"workspace values are at most {MAX_VALUE_BYTES} bytes")
        with self._lock:
            count = self._db.execute(
                "SELECT COUNT(*) FROM workspace WHERE tree=?", (tree,)).fetchone()[0]
            if count >= MAX_KEYS_PER_TREE:
                raise WorkspaceError(f"a workspace holds at most {MAX_KEYS_PER_TREE} keys")
            self._db.execute(
                "INSERT INTO workspace(tree, key, value, created_at) VALUES (?,?,?,?) "
                "ON CONFLICT(tree, key) DO UPDATE SET value=excluded.value",
                (tree, key, text, time.time()),
            )

    def purge(self, now: float | None = None) -> int:
        cutoff = (now if now is not None else time.time()) - self.ttl_seconds
        with self._lock:
            return self._db.execute(
                "DELETE FROM workspace WHERE created_at<?", (cutoff,)).rowcount

    def close(self) -> None:
        with self._lock:
            self._db.close()
