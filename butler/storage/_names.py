"""Texts that repeat on every row of a store (an audit record's kind, caller and
decision; a task's owner), each kept once in a table ``(ref, name)`` and written in the
rows as its number: a BLOB of one byte (two past 255), which SQLite keeps as it is in a
column of any affinity, so a row tells a number (BLOB) from a text written as itself
(TEXT) by its type alone. A file numbers at most ``MAX_NAMES`` texts, so a caller who
sends many cannot grow the table without bound; past that a text is written as itself.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Final

MAX_NAMES: Final = 4096


def names_table(table: str) -> str:
    return (f"CREATE TABLE IF NOT EXISTS {table} (\n    ref  INTEGER PRIMARY KEY,\n"
            "    name TEXT NOT NULL UNIQUE\n)")


def _stored(ref: int) -> bytes:
    return ref.to_bytes(1 if ref < 256 else 2, "big")


class NumberedNames:
    """One table's numbers as read (``load``), and added to (``add``) inside the
    caller's transaction: a long-lived copy adds only once that committed (``known``)."""

    def __init__(self, table: str, rows: Iterable[tuple[int, str]] = ()) -> None:
        self.table = table
        self.by_ref: dict[int, str] = {}
        self._by_name: dict[str, bytes] = {}
        self.known(rows)

    @classmethod
    def load(cls, conn: sqlite3.Connection, table: str) -> NumberedNames:
        return cls(table, conn.execute(f"SELECT ref, name FROM {table}"))

    def known(self, rows: Iterable[tuple[int, str]]) -> None:
        for ref, name in rows:
            self.by_ref[ref], self._by_name[name] = name, _stored(ref)

    def find(self, name: str) -> bytes | None:
        """``name``'s number as stored, if it has one."""
        return self._by_name.get(name)

    def stored(self, text: object) -> object:
        """A text as a row keeps it: its number if it has one, else itself."""
        return self._by_name.get(text, text) if type(text) is str else text

    def add(self, conn: sqlite3.Connection, name: str) -> tuple[int, str] | None:
        """Inside a transaction: number ``name`` if it is new and there is room; the new
        ``(ref, name)``, for ``known`` once committed (None if nothing was added)."""
        if name in self._by_name:
            return None
        row = conn.execute(f"SELECT ref FROM {self.table} WHERE name = ?", (name,)).fetchone()
        if row is not None:  # added by another process, or a copy not yet told
            return int(row[0]), name
        count, top = conn.execute(f"SELECT count(*), max(ref) FROM {self.table}").fetchone()
        if count >= MAX_NAMES:
            return None
        conn.execute(f"INSERT INTO {self.table} (ref, name) VALUES (?, ?)",
                     ((top or 0) + 1, name))
        return (top or 0) + 1, name

    def name(self, value: object) -> object:
        """A stored text column read back: a number looked up (None when it has none:
        the caller reports the row as edited), a text as it is."""
        if type(value) is not bytes:
            return value
        return self.by_ref.get(int.from_bytes(value, "big"))
