"""The task store's schema, and its migration in place from older files.

Every query the store makes is an index walk (docs/tasks.md#storage): listing by
creation (``seq``) or by last update (``updated``) by a state, or an owner and a state,
walks an index in that order; by an owner alone, or everyone's by last update, walks
the owner's (or everyone's) index once per state and merges the walks, each at most a
page long; a context is found by its index. Purging and recovery walk each terminal
state's ``updated``. The totals the A2A ListTasks answer carries come from
``task_counts``, which triggers keep per owner and state, instead of a count over every
matching row.

``PRAGMA user_version`` says which schema a file has. A file from before it (version 0,
one JSON body per task, text times and states) is rewritten on open: each row is
decoded the old way and written the new way, in one transaction, and the file is then
vacuumed with incremental auto-vacuum turned on, so purged pages go back to the disk.
A version 1 file only gains ``receipt_signers``: its rows read as they are.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import replace
from decimal import Decimal

from butler.engine.receipt_rows import SIGNERS_TABLE
from butler.engine.task_row import OPEN_CODES, OWNERS_TABLE, row_columns
from butler.storage import NumberedNames, names_table, schema_version
from internal.protocol.a2a.codec import butler_v2, exact_json
from internal.protocol.a2a.model import Message, Task

log = logging.getLogger("butler.engine")

# 1: the compact row; 2: receipt_signers (receipts kept compact); 3: five listing
# indexes, not eight (an owner's or everyone's tasks are walked state by state, merged);
# 4: a body may be a BLOB (receipts' binary fields after its JSON), which 3 cannot read;
# 5: owners numbered in task_owners (rows and task_counts hold the number), which 4
# cannot read.
VERSION = 5

_TABLES = ("""
CREATE TABLE tasks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    context_id TEXT NOT NULL,
    state INTEGER NOT NULL,
    updated INTEGER NOT NULL,
    body TEXT NOT NULL
)""", """
CREATE TABLE task_counts (
    owner TEXT NOT NULL,
    state INTEGER NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (owner, state)
) WITHOUT ROWID""", SIGNERS_TABLE, names_table(OWNERS_TABLE))

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

_UPGRADE = (SIGNERS_TABLE, names_table(OWNERS_TABLE), "DROP INDEX IF EXISTS tasks_owner",
            "DROP INDEX IF EXISTS tasks_owner_updated", "DROP INDEX IF EXISTS tasks_updated")

INSERT = ("INSERT INTO tasks(id, owner, context_id, state, updated, body) "
          "VALUES (?,?,?,?,?,?)")
UPSERT = INSERT + (" ON CONFLICT(id) DO UPDATE SET state=excluded.state, "
                   "updated=excluded.updated, body=excluded.body")
OPEN_STATES = ",".join(map(str, OPEN_CODES))
_MIGRATE_CHUNK = 5000


def create_schema(conn: sqlite3.Connection) -> None:
    """On open: create, or migrate, or nothing (the file is current)."""
    version = schema_version(conn, "tasks", VERSION)
    if version == VERSION:
        return
    legacy = conn.execute("SELECT 1 FROM sqlite_master WHERE name='tasks'").fetchone()
    conn.execute("BEGIN IMMEDIATE")
    try:
        if legacy is not None and version >= 1:
            # Rows of version 1 keep their receipts as text, which is read as it is:
            # only the signers' table is new, and three indexes go. Their pages are
            # reused by new rows, and given back by the purges' incremental vacuum.
            # Owners are numbered in place (each row rewritten).
            for statement in _UPGRADE:
                conn.execute(statement)
            _number_owners(conn)
            conn.execute(f"PRAGMA user_version={VERSION}")
            conn.execute("COMMIT")
            return
        if legacy is not None:
            conn.execute("ALTER TABLE tasks RENAME TO tasks_v0")
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='index' "
                                        "AND tbl_name='tasks_v0' AND sql IS NOT NULL")\
                    .fetchall():
                conn.execute(f'DROP INDEX "{name}"')
        for statement in _TABLES:
            conn.execute(statement)
        if legacy is not None:
            _copy_v0(conn)
        for statement in _INDEXES:
            conn.execute(statement)
        if legacy is not None:
            _recount(conn)
            _number_owners(conn)
        conn.execute(f"PRAGMA user_version={VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    if legacy is not None:
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("VACUUM")  # takes the setting, and gives the old rows' pages back


def _copy_v0(conn: sqlite3.Connection) -> None:
    """Rows in the order they were created, so ``seq`` (the list order) is kept."""
    copied, after = 0, -1
    while True:
        rows = conn.execute("SELECT seq, id, body FROM tasks_v0 WHERE seq > ? ORDER BY seq "
                            "LIMIT ?", (after, _MIGRATE_CHUNK)).fetchall()
        if not rows:
            break
        conn.executemany("INSERT INTO tasks(seq, id, owner, context_id, state, updated, body) "
                         "VALUES (?,?,?,?,?,?,?)",
                         [(seq, *row_columns(decode_v0(task_id, body)))
                          for seq, task_id, body in rows])
        copied += len(rows)
        after = rows[-1][0]
    conn.execute("DROP TABLE tasks_v0")
    log.info("tasks database migrated to schema %d: %d task(s)", VERSION, copied)


def _number_owners(conn: sqlite3.Connection) -> None:
    """Each owner a row holds as text given its number, in the rows and the counts."""
    owners = NumberedNames.load(conn, OWNERS_TABLE)
    texts = conn.execute("SELECT DISTINCT owner FROM tasks WHERE typeof(owner) = 'text'")
    for (owner,) in texts.fetchall():
        added = owners.add(conn, owner)
        if added is not None:
            owners.known([added])
        if (number := owners.find(owner)) is not None:
            conn.execute("UPDATE tasks SET owner = ? WHERE owner = ?", (number, owner))
            conn.execute("UPDATE task_counts SET owner = ? WHERE owner = ?", (number, owner))
    log.info("tasks database: owners numbered (%d)", len(owners.by_ref))


def _recount(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO task_counts(owner, state, n) "
                 "SELECT owner, state, count(*) FROM tasks GROUP BY owner, state")


def decode_v0(task_id: str, body: str) -> Task:
    """A version 0 row: ``{"task": <the /v2 task>, "owner", "request", "messages"?,
    "reply_as_message"?}``; messages in that version's encoding."""
    data = exact_json.loads(body, max_depth=256)
    task = butler_v2.decode_task(data["task"])
    messages = tuple(
        Message(message_id=m["message_id"], role=m["role"],
                parts=butler_v2.decode_parts(m["parts"]), context_id=m["context_id"],
                task_id=m["task_id"], metadata=m.get("metadata"),
                extensions=tuple(m.get("extensions", ())),
                reference_task_ids=tuple(m.get("reference_task_ids", ())), at=m["at"])
        for m in data.get("messages", ()))
    request = data["request"]
    if isinstance(request.get("timeout_seconds"), str):  # version 0 wrote it as a string
        request["timeout_seconds"] = Decimal(request["timeout_seconds"])
    return replace(task, id=task_id, owner=data["owner"],
                   request=butler_v2.decode_task_request(request),
                   messages=messages, reply_as_message=data.get("reply_as_message") is True)
