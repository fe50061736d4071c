"""Push-notification configs, durable in ``<data_dir>/push.db`` (SQLite, WAL)."""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from internal.protocol.a2a.model import PushConfig

_SCHEMA = """
CREATE TABLE IF NOT EXISTS push_configs (
    task_id TEXT NOT NULL,
    id TEXT NOT NULL,
    url TEXT NOT NULL,
    token TEXT NOT NULL,
    auth_scheme TEXT NOT NULL,
    auth_credentials TEXT NOT NULL,
    wire TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (task_id, id)
);
"""
_COLUMNS = "task_id, id, url, token, auth_scheme, auth_credentials, wire"


def _config(row: tuple[Any, ...]) -> PushConfig:
    return PushConfig(task_id=row[0], id=row[1], url=row[2], token=row[3], auth_scheme=row[4],
                      auth_credentials=row[5], wire=row[6])


class SqlitePushStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="push-store")
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def put(self, config: PushConfig) -> None:
        def put() -> None:
            seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM push_configs "
                                   "WHERE task_id=?", (config.task_id,)).fetchone()[0]
            self._db.execute(
                f"INSERT INTO push_configs({_COLUMNS}, seq) VALUES (?,?,?,?,?,?,?,?) "
                "ON CONFLICT(task_id, id) DO UPDATE SET url=excluded.url, "
                "token=excluded.token, auth_scheme=excluded.auth_scheme, "
                "auth_credentials=excluded.auth_credentials, wire=excluded.wire",
                (config.task_id, config.id, config.url, config.token, config.auth_scheme,
                 config.auth_credentials, config.wire, seq))

        await self._run(put)

    async def list_configs(self, task_id: str) -> list[PushConfig]:
        rows = await self._run(lambda: self._db.execute(
            f"SELECT {_COLUMNS} FROM push_configs WHERE task_id=? ORDER BY seq",
            (task_id,)).fetchall())
        return [_config(r) for r in rows]

    async def delete(self, task_id: str, config_id: str) -> bool:
        cur = await self._run(lambda: self._db.execute(
            "DELETE FROM push_configs WHERE task_id=? AND id=?", (task_id, config_id)))
        return bool(cur.rowcount)

    async def delete_for_tasks(self, task_ids: list[str]) -> None:
        def delete() -> None:
            self._db.executemany("DELETE FROM push_configs WHERE task_id=?",
                                 [(t,) for t in task_ids])

        await self._run(delete)

    async def all_configs(self) -> list[PushConfig]:
        rows = await self._run(lambda: self._db.execute(
            f"SELECT {_COLUMNS} FROM push_configs ORDER BY task_id, seq").fetchall())
        return [_config(r) for r in rows]

    async def close(self) -> None:
        await self._run(self._db.close)
        self._pool.shutdown(wait=True)
