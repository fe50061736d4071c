"""``butler log verify``: an agent's whole receipt log checked against what it stored.

- every signed head is signed by the agent's key (or one its rotations lead from), names
  the agent, and its root is the root the stored nodes give for its size: heads of
  growing sizes over one set of nodes, so each extends the one before;
- every stored task's own receipt that is in the log is the leaf the log holds at its
  index, within the log, and no two tasks hold the same leaf;
- every final audit record that names a leaf names its task's leaf, and no leaf is named
  by two records: each ended task is in the log exactly once.

Tasks purged by retention leave their leaves in the log (proofs of receipts handed out
stay checkable); they are counted, not flagged.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field

from butler.identity import receipt_log
from butler.identity.receipts import HEAD_TYPE, parse_logged
from butler.storage import Database
from internal.signing import (
    BadSignature,
    PublicKey,
    canonical,
    jws_claims,
    jws_payload,
    merkle,
    public_key_from_jwk,
    unb64url,
    verify_jws,
)

# Whether a key (read from a head's header) is the agent's, now or before a rotation.
KeyCheck = Callable[[PublicKey], bool]


@dataclass
class LogCheck:
    heads: int = 0
    size: int = 0
    tasks: int = 0  # stored tasks whose receipt is in the log
    before_log: int = 0  # stored tasks sealed with a per-task receipt (before the upgrade)
    audited: int = 0  # final audit records naming a leaf
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_log(tasks: Database, audit: Database | None, agent_id: str,
              is_agents: KeyCheck) -> LogCheck:
    """``tasks`` and ``audit``: the agent's databases, opened for a blocking caller."""
    result = LogCheck()
    leaves = tasks.call(_check_tasks_db, agent_id, is_agents, result)
    if audit is not None:
        audit.call(_check_audit, leaves, result)
    return result


def _check_tasks_db(conn: sqlite3.Connection, agent_id: str, is_agents: KeyCheck,
                    result: LogCheck) -> dict[str, int]:
    _check_heads(conn, agent_id, is_agents, result)
    return _check_tasks(conn, agent_id, result)


def _check_heads(conn: sqlite3.Connection, agent_id: str, is_agents: KeyCheck,
                 result: LogCheck) -> None:

    def read(level: int, index: int) -> bytes:
        return receipt_log.node(conn, level, index)

    for size, head in conn.execute("SELECT size, head FROM receipt_heads ORDER BY size"):
        result.heads += 1
        try:
            header, _ = jws_payload(head)
            key = public_key_from_jwk(header.get("jwk"))
            if not is_agents(key):
                raise BadSignature(f"signed by key {key.kid}, which is not {agent_id}'s")
            verify_jws(head, key)
            claims = jws_claims(head, HEAD_TYPE)
            if claims.get("size") != size or claims.get("agent") != agent_id:
                raise BadSignature("it names another size or agent than it is stored as")
            if unb64url(str(claims.get("root"))) != merkle.root(size, read):
                raise BadSignature("its root is not the stored log's")
        except (BadSignature, merkle.BadProof) as exc:
            result.problems.append(f"head of size {size}: {exc}")
        result.size = size


def _check_tasks(conn: sqlite3.Connection, agent_id: str, result: LogCheck) -> dict[str, int]:
    """Checks every stored task's receipt; returns {task id: its leaf}."""
    held: dict[int, str] = {}
    leaves: dict[str, int] = {}
    for task_id, document in conn.execute("SELECT id, document FROM tasks"):
        receipts = json.loads(document).get("receipts") or []
        if not receipts:
            continue
        if not receipts[0].startswith("{"):
            result.before_log += 1
            continue
        try:
            logged = parse_logged(receipts[0])
            if logged.claims.get("agent") != agent_id:
                raise BadSignature(f"its receipt is {logged.claims.get('agent')}'s")
            if not 0 <= logged.leaf < result.size:
                raise BadSignature(f"its leaf {logged.leaf} is not in the log "
                                   f"({result.size} leaves)")
            if receipt_log.node(conn, 0, logged.leaf) != \
                    merkle.leaf_hash(canonical(logged.claims)):
                raise BadSignature(f"the log's leaf {logged.leaf} is another receipt")
            if logged.leaf in held:
                raise BadSignature(f"leaf {logged.leaf} is task {held[logged.leaf]}'s too")
        except (BadSignature, merkle.BadProof) as exc:
            result.problems.append(f"task {task_id}: {exc}")
            continue
        held[logged.leaf] = task_id
        leaves[task_id] = logged.leaf
        result.tasks += 1
    return leaves


def _check_audit(conn: sqlite3.Connection, leaves: dict[str, int], result: LogCheck) -> None:
    named: dict[int, str] = {}
    for seq, task_id, detail in conn.execute(
            "SELECT seq, task_id, detail FROM audit WHERE kind='task_finished' ORDER BY seq"):
        leaf_text = json.loads(detail).get("leaf") if detail else None
        if leaf_text is None:
            continue
        try:
            leaf = int(leaf_text)
        except ValueError:
            result.problems.append(f"audit record {seq}: leaf {leaf_text!r} is no number")
            continue
        result.audited += 1
        if leaf in named:
            result.problems.append(f"audit record {seq}: leaf {leaf} is named by the "
                                   f"final record of task {named[leaf]} too")
        elif task_id in leaves and leaves[task_id] != leaf:
            result.problems.append(f"audit record {seq}: names leaf {leaf}, task "
                                   f"{task_id}'s receipt is leaf {leaves[task_id]}")
        elif not 0 <= leaf < result.size:
            result.problems.append(f"audit record {seq}: leaf {leaf} is not in the log")
        named[leaf] = str(task_id)
