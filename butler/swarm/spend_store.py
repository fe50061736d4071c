"""``spend.db``: each capped caller's tasks and USD per minute, and the reservations of its
running tasks, on the one SQLite layer (``butler.storage``).

A minute's row holds its totals, written whole (the worker runs writes in the order they
were queued, so the last one queued is the one that stands). A reservation is committed
before its task is: a crash can over-count a caller (a task cut off keeps its whole
reservation), never under-count it.
"""

from __future__ import annotations

import logging
import sqlite3
from concurrent.futures import Future
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from butler.storage import Database

log = logging.getLogger("butler.spend")

FILE_NAME = "spend.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spend_minutes (
    caller TEXT NOT NULL,
    minute INTEGER NOT NULL,
    usd TEXT NOT NULL,
    tasks INTEGER NOT NULL,
    PRIMARY KEY (caller, minute)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS spend_open (
    task_id TEXT PRIMARY KEY,
    caller TEXT NOT NULL,
    minute INTEGER NOT NULL,
    reserved TEXT NOT NULL
) WITHOUT ROWID;
"""

_PUT_MINUTE = ("INSERT INTO spend_minutes(caller, minute, usd, tasks) VALUES (?,?,?,?) "
               "ON CONFLICT(caller, minute) DO UPDATE SET usd=excluded.usd, tasks=excluded.tasks")


@dataclass(frozen=True, slots=True)
class MinuteRow:
    caller: str
    minute: int
    usd: Decimal
    tasks: int


@dataclass(frozen=True, slots=True)
class OpenRow:
    task_id: str
    caller: str
    minute: int
    reserved: Decimal


def _create_schema(conn: sqlite3.Connection) -> None:
    conn.executescript(_SCHEMA)


class SpendStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.failures = 0  # writes that did not commit (logged; counted for tests)

    @classmethod
    async def open(cls, data_dir: Path) -> SpendStore:
        return cls(await Database.open(data_dir / FILE_NAME, name="spend", setup=_create_schema))

    @classmethod
    def open_blocking(cls, data_dir: Path) -> SpendStore:
        return cls(Database.open_blocking(data_dir / FILE_NAME, name="spend",
                                          setup=_create_schema))

    async def recover(self, since_minute: int) -> list[MinuteRow]:
        """At start-up: the minutes still in a window. Reservations left open by a crash
        stay counted in full (their tasks may have spent them) and are closed."""
        return await self.db.transaction(_recover, since_minute)

    def read(self, since_minute: int) -> tuple[list[MinuteRow], list[OpenRow]]:
        """For the CLI, beside a running daemon: the minutes and the open reservations."""
        return self.db.call(_read, since_minute)

    async def reserve(self, row: OpenRow, minute: MinuteRow, purge_before: int | None) -> None:
        await self.db.transaction(_reserve, row, minute, purge_before)

    def settle(self, task_id: str, minute: MinuteRow | None) -> None:
        """Queued, not awaited: if it is lost, the reservation stays counted in full."""
        done = self.db.submit(_settle, task_id, minute, write=True)
        done.add_done_callback(self._check)

    def _check(self, done: Future[Any]) -> None:
        if not done.cancelled() and done.exception() is not None:
            self.failures += 1
            log.error("could not record a settled spend (%d so far): %s", self.failures,
                      done.exception())

    async def close(self) -> None:
        await self.db.close()


def _minutes(conn: sqlite3.Connection, since_minute: int) -> list[MinuteRow]:
    rows = conn.execute("SELECT caller, minute, usd, tasks FROM spend_minutes WHERE minute>?",
                        (since_minute,)).fetchall()
    return [MinuteRow(c, m, Decimal(u), t) for c, m, u, t in rows]


def _recover(conn: sqlite3.Connection, since_minute: int) -> list[MinuteRow]:
    conn.execute("DELETE FROM spend_minutes WHERE minute<=?", (since_minute,))
    conn.execute("DELETE FROM spend_open")
    return _minutes(conn, since_minute)


def _read(conn: sqlite3.Connection, since_minute: int) -> tuple[list[MinuteRow], list[OpenRow]]:
    opened = conn.execute("SELECT task_id, caller, minute, reserved FROM spend_open").fetchall()
    return _minutes(conn, since_minute), [OpenRow(i, c, m, Decimal(r)) for i, c, m, r in opened]


def _put_minute(conn: sqlite3.Connection, row: MinuteRow) -> None:
    conn.execute(_PUT_MINUTE, (row.caller, row.minute, str(row.usd), row.tasks))


def _reserve(conn: sqlite3.Connection, row: OpenRow, minute: MinuteRow,
             purge_before: int | None) -> None:
    conn.execute("INSERT OR REPLACE INTO spend_open(task_id, caller, minute, reserved) "
                 "VALUES (?,?,?,?)", (row.task_id, row.caller, row.minute, str(row.reserved)))
    _put_minute(conn, minute)
    if purge_before is not None:
        conn.execute("DELETE FROM spend_minutes WHERE minute<=?", (purge_before,))


def _settle(conn: sqlite3.Connection, task_id: str, minute: MinuteRow | None) -> None:
    conn.execute("DELETE FROM spend_open WHERE task_id=?", (task_id,))
    if minute is not None:
        _put_minute(conn, minute)
