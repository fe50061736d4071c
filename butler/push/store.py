"""Push-notification configs, durable in ``<data_dir>/push.db`` (``butler.storage``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from butler.storage import Database
from internal.protocol.a2a.model import PushConfig
from internal.shares import PoolFull, Share

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
    owner TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (task_id, id)
);
"""
_COLUMNS = "task_id, id, url, token, auth_scheme, auth_credentials, wire"


def _config(row: tuple[Any, ...]) -> PushConfig:
    return PushConfig(task_id=row[0], id=row[1], url=row[2], token=row[3], auth_scheme=row[4],
                      auth_credentials=row[5], wire=row[6])


def _create_schema(conn: sqlite3.Connection) -> None:
    conn.executescript(_SCHEMA)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(push_configs)")}
    if "owner" not in columns:  # a store from before shares: its configs count for nobody
        conn.execute("ALTER TABLE push_configs ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
    conn.execute("CREATE INDEX IF NOT EXISTS push_configs_owner ON push_configs(owner)")


class SqlitePushStore:
    """``SqlitePushStore(path)``, then ``await open()`` before any other call."""

    def __init__(self, path: Path) -> None:
        self._db = Database(path, name="push", setup=_create_schema)

    async def open(self) -> None:
        await self._db.start()

    async def put(self, config: PushConfig, owner: str = "", share: Share | None = None,
                  ) -> None:
        """Add or replace a config; a new one within ``owner``'s ``share`` of them
        (``PoolFull`` past it)."""
        await self._db.transaction(_put, config, owner, share)

    async def list_configs(self, task_id: str) -> list[PushConfig]:
        rows = await self._db.fetchall(
            f"SELECT {_COLUMNS} FROM push_configs WHERE task_id=? ORDER BY seq", (task_id,))
        return [_config(r) for r in rows]

    async def delete(self, task_id: str, config_id: str) -> bool:
        return bool(await self._db.execute(
            "DELETE FROM push_configs WHERE task_id=? AND id=?", (task_id, config_id)))

    async def delete_for_tasks(self, task_ids: list[str]) -> None:
        await self._db.transaction(_delete_for_tasks, task_ids)

    async def all_configs(self) -> list[PushConfig]:
        rows = await self._db.fetchall(
            f"SELECT {_COLUMNS} FROM push_configs ORDER BY task_id, seq")
        return [_config(r) for r in rows]

    async def close(self) -> None:
        await self._db.close()


def _put(conn: sqlite3.Connection, config: PushConfig, owner: str,
         share: Share | None) -> None:
    # Counted in the transaction that adds: concurrent creates cannot both pass the check.
    if share is not None and conn.execute(
            "SELECT 1 FROM push_configs WHERE task_id=? AND id=?",
            (config.task_id, config.id)).fetchone() is None:
        mine = conn.execute("SELECT COUNT(*) FROM push_configs WHERE owner=?",
                            (owner,)).fetchone()[0]
        everyone = conn.execute("SELECT COUNT(*) FROM push_configs").fetchone()[0]
        why = share.refusal("push notification configs", owner, mine, everyone)
        if why is not None:
            raise PoolFull(why, mine=mine >= share.limit_for(owner), retry_after=60)
    seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM push_configs WHERE task_id=?",
                       (config.task_id,)).fetchone()[0]
    conn.execute(
        f"INSERT INTO push_configs({_COLUMNS}, seq, owner) VALUES (?,?,?,?,?,?,?,?,?) "
        "ON CONFLICT(task_id, id) DO UPDATE SET url=excluded.url, "
        "token=excluded.token, auth_scheme=excluded.auth_scheme, "
        "auth_credentials=excluded.auth_credentials, wire=excluded.wire",
        (config.task_id, config.id, config.url, config.token, config.auth_scheme,
         config.auth_credentials, config.wire, seq, owner))


def _delete_for_tasks(conn: sqlite3.Connection, task_ids: list[str]) -> None:
    conn.executemany("DELETE FROM push_configs WHERE task_id=?", [(t,) for t in task_ids])
