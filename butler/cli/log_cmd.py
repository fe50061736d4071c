"""``butler log verify``: this agent's receipt log checked against its stored tasks and
its audit trail (``butler.identity.log_check``); exit 1 on anything that does not check.
``butler log head``: its latest signed tree head."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from butler.audit import AuditLog
from butler.cli.serve import agent_arg, load_or_exit
from butler.config.model import Config
from butler.engine.task_schema import VERSION
from butler.identity import receipt_log
from butler.identity.key_file import read_identity
from butler.identity.log_check import LogCheck, check_log
from butler.storage import Database
from internal.signing import PublicKey, rotated_to


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    log = sub.add_parser("log", help="verify or show this agent's receipt log")
    lsub = log.add_subparsers(dest="log_command", metavar="ACTION", required=True)
    verify = lsub.add_parser("verify", help="check every signed head, every stored task's "
                                            "leaf and the audit trail's; exit 1 if not")
    head = lsub.add_parser("head", help="print the latest signed tree head")
    for p, fn in ((verify, _verify), (head, _head)):
        p.add_argument("-c", "--config", default=os.environ.get("BUTLER_CONFIG"))
        p.add_argument("--json", action="store_true", help="one JSON object")
        agent_arg(p)
        p.set_defaults(handler=fn)


def check_receipt_log(config: Config) -> LogCheck | None:
    """The agent's receipt log checked against its tasks and audit trail; None when its
    data folder holds none (no key or no tasks yet)."""
    tasks_db, audit_db = config.data_dir / "tasks.db", config.data_dir / "audit.db"
    identity = read_identity(config.data_dir)
    if identity is None or not tasks_db.exists():
        return None

    def is_agents(key: PublicKey) -> bool:
        return key.kid == identity.kid or rotated_to(key, identity.kid, identity.rotations)

    # Opened as the daemon opens them (a later schema is refused), not migrated.
    with _tasks(tasks_db) as tasks:
        if not audit_db.exists():
            return check_log(tasks, None, config.agent.id, is_agents)
        with AuditLog(audit_db) as audit:
            return check_log(tasks, audit.db, config.agent.id, is_agents)


@contextlib.contextmanager
def _tasks(path: Path) -> Iterator[Database]:
    db = Database.open_blocking(path, name="tasks", version=VERSION)
    try:
        yield db
    finally:
        db.close_blocking()


def _verify(args: argparse.Namespace) -> int:
    config = load_or_exit(args.config, secrets=False, agent=args.agent)
    if config is None:
        return 2
    result = check_receipt_log(config)
    if result is None:
        print(f"butler: no receipt log in {config.data_dir}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"ok": result.ok, "size": result.size, "heads": result.heads,
                          "tasks": result.tasks, "tasks_before_log": result.before_log,
                          "audit_records": result.audited, "problems": result.problems}))
    elif result.ok:
        print(f"receipt log intact: {result.size} leaves under {result.heads} signed "
              f"head(s); {result.tasks} stored task(s) and {result.audited} final audit "
              f"record(s) match it ({result.before_log} task(s) from before the log)")
    else:
        print(f"receipt log INVALID: {len(result.problems)} problem(s)")
        print("\n".join(result.problems))
    return 0 if result.ok else 1


def _head(args: argparse.Namespace) -> int:
    config = load_or_exit(args.config, secrets=False, agent=args.agent)
    if config is None:
        return 2
    tasks_db = config.data_dir / "tasks.db"
    if not tasks_db.exists():
        print(f"butler: no receipt log in {config.data_dir}", file=sys.stderr)
        return 2
    with _tasks(tasks_db) as tasks:
        size, head = tasks.call(receipt_log.size), tasks.call(receipt_log.head)
    print(json.dumps({"size": size, "head": head}) if args.json else
          f"{size} receipt(s)\n{head or '(no head yet)'}")
    return 0
