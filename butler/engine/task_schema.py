"""The task store's schema, and the migration in place of files an earlier release wrote.

Every query the store makes is an index walk (docs/tasks.md#storage): listing by
creation (``seq``) or by last update (``updated``) by a state, or an owner and a state,
walks an index in that order; by an owner alone, or everyone's by last update, walks
the owner's (or everyone's) index once per state and merges the walks, each at most a
page long; a context is found by its index. Purging and recovery walk each terminal
state's ``updated``. The totals the A2A ListTasks answer carries come from
``task_counts``, which triggers keep per owner and state, instead of a count over every
matching row.

``PRAGMA user_version`` says which schema a file has. A file of an earlier schema (0 to
5) is migrated once, when it is opened: every row is read the way its release wrote it
(``task_migration``) and written as this schema's, in one transaction, so a migration
cut short (a crash, a kill) leaves the old file as it was, and the next start does it
again. A file of a later schema is refused and left untouched.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
from collections.abc import Callable
from typing import Any

from butler.engine.task_document import task_row
from butler.engine.task_migration import OldRows, decode_v0, hex_text
from butler.identity.receipt_log import LOG_TABLES
from butler.storage import schema_version
from internal.protocol.a2a.model import Task, TaskState

log = logging.getLogger("butler.engine")

# 7: the receipt log's tables (``receipt_log``), beside the tasks. 6: one keyed row per
# task (``task_document``): text ids, owners and states, receipts as their text. 1-5
# were positional layouts (``task_migration``).
VERSION = 7

_TABLES = ("""
CREATE TABLE tasks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    context_id TEXT NOT NULL,
    state TEXT NOT NULL,
    updated INTEGER NOT NULL,
    document TEXT NOT NULL
)""", """
CREATE TABLE task_counts (
    owner TEXT NOT NULL,
    state TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (owner, state)
) WITHOUT ROWID""")

_INDEXES = (
    "CREATE INDEX tasks_owner_state ON tasks(owner, state, seq)",
    "CREATE INDEX tasks_owner_state_updated ON tasks(owner, state, updated, seq)",
    "CREATE INDEX tasks_state ON tasks(state, seq)",
    "CREATE INDEX tasks_state_updated ON tasks(state, updated, seq)",
    "CREATE INDEX tasks_context ON tasks(context_id, seq)",
    """CREATE TRIGGER tasks_counted AFTER INSERT ON tasks BEGIN
    INSERT INTO task_counts(owner, state, n) VALUES (new.owner, new.state, 1)
        ON CONFLICT(owner, state) DO UPDATE SET n = n + 1;
END""", """CREATE TRIGGER tasks_recounted AFTER UPDATE OF state ON tasks
WHEN old.state != new.state BEGIN
    UPDATE task_counts SET n = n - 1 WHERE owner = old.owner AND state = old.state;
    INSERT INTO task_counts(owner, state, n) VALUES (new.owner, new.state, 1)
        ON CONFLICT(owner, state) DO UPDATE SET n = n + 1;
END""", """CREATE TRIGGER tasks_uncounted AFTER DELETE ON tasks BEGIN
    UPDATE task_counts SET n = n - 1 WHERE owner = old.owner AND state = old.state;
END""",
)

_INSERT = ("INSERT INTO tasks(id, owner, context_id, state, updated, document) "
           "VALUES (?,?,?,?,?,?)")
UPSERT = _INSERT + (" ON CONFLICT(id) DO UPDATE SET state=excluded.state, "
                    "updated=excluded.updated, document=excluded.document")
OPEN_STATES = ",".join(f"'{s.value}'" for s in TaskState if not s.terminal)
TERMINAL_STATES = ",".join(f"'{s.value}'" for s in TaskState if s.terminal)
# Rows read and written per step of a migration; progress is shown past one step.
MIGRATE_CHUNK = 5000
_OLD_TABLES = ("receipt_signers", "task_owners")


def create_schema(conn: sqlite3.Connection,
                  progress: Callable[[str], None] | None = None) -> None:
    """On open: create, or migrate, or nothing (the file is current)."""
    version = schema_version(conn, "tasks", VERSION)
    if version == VERSION:
        return
    if version == 6:  # the tasks are kept as they are: only the log is new
        conn.execute("BEGIN IMMEDIATE")
        for statement in LOG_TABLES:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version={VERSION}")
        conn.execute("COMMIT")
        return
    old = conn.execute("SELECT 1 FROM sqlite_master WHERE name='tasks'").fetchone()
    conn.execute("BEGIN IMMEDIATE")
    try:
        if old is not None:
            conn.execute("ALTER TABLE tasks RENAME TO tasks_old")
            for kind, name in conn.execute(
                    "SELECT type, name FROM sqlite_master WHERE type IN ('index', 'trigger') "
                    "AND tbl_name='tasks_old' AND sql IS NOT NULL").fetchall():
                conn.execute(f'DROP {kind.upper()} "{name}"')
            conn.execute("DROP TABLE IF EXISTS task_counts")
        for statement in (*_TABLES, *LOG_TABLES):
            conn.execute(statement)
        if old is not None:
            _copy(conn, version, progress or _to_stderr)
        for statement in _INDEXES:
            conn.execute(statement)
        if old is not None:
            conn.execute("INSERT INTO task_counts(owner, state, n) "
                          "SELECT owner, state, count(*) FROM tasks GROUP BY owner, state")
            for table in _OLD_TABLES:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"PRAGMA user_version={VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    if old is not None:
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("VACUUM")  # gives the old rows' pages back


def _copy(conn: sqlite3.Connection, version: int, progress: Callable[[str], None]) -> None:
    """Every old row, in the order it was created (``seq``, the list order, is kept)."""
    total = conn.execute("SELECT count(*) FROM tasks_old").fetchone()[0]
    old = OldRows(conn) if version >= 1 else None
    columns = "seq, id, body" if old is None else \
        "seq, id, owner, context_id, state, updated, body"
    copied, after = 0, -1
    while True:
        rows = conn.execute(f"SELECT {columns} FROM tasks_old WHERE seq > ? ORDER BY seq "
                            "LIMIT ?", (after, MIGRATE_CHUNK)).fetchall()
        if not rows:
            break
        tasks = [(row[0], _read(old, row)) for row in rows]
        conn.executemany("INSERT INTO tasks(seq, id, owner, context_id, state, updated, "
                         "document) VALUES (?,?,?,?,?,?,?)",
                         [(seq, *task_row(task)) for seq, task in tasks])
        copied += len(rows)
        after = rows[-1][0]
        if total > MIGRATE_CHUNK:
            progress(f"tasks database: migrating to schema {VERSION}: "
                     f"{copied} of {total} tasks")
    conn.execute("DROP TABLE tasks_old")
    done = f"tasks database: migrated {copied} task(s) from schema {version} to {VERSION}"
    log.info("%s", done)
    if total > MIGRATE_CHUNK:
        progress(done)


def _read(old: OldRows | None, row: tuple[Any, ...]) -> Task:
    try:
        return decode_v0(row[1], row[2]) if old is None else old.task(*row[1:])
    except Exception as exc:
        raise RuntimeError(f"tasks database: task {hex_text(row[1])} (row {row[0]}) cannot "
                           f"be read to migrate it, and nothing was changed: {exc}") from exc


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)

