"""``butler audit tail|verify|export``: read this instance's hash-chained audit trail."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from butler.audit import AuditLog
from butler.audit.retention import ARCHIVE
from butler.audit.segments import export, segments, verify_history
from butler.cli.json_output import error_json, json_flag, print_json
from butler.cli.log_cmd import check_receipt_log
from butler.cli.serve import agent_arg, load_or_exit


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = sub.add_parser("audit", help="show or verify the audit trail")
    asub = audit.add_subparsers(dest="audit_command", metavar="ACTION", required=True)
    tail = asub.add_parser("tail", help="print the latest audit records")
    tail.add_argument("-n", type=int, default=20, help="how many records (default 20)")
    json_flag(tail, "print each record as a line of JSON")
    verify = asub.add_parser("verify", help="check the hash chain; exit 1 if tampered")
    verify.add_argument("--exports", metavar="DIR",
                        help="also check the exported segments in DIR, from the first "
                             "record (default: the live log, from its last sealed hash)")
    export = asub.add_parser("export", help="write the sealed segments to files")
    export.add_argument("--out", metavar="DIR",
                        help=f"where (default: <data_dir>/{ARCHIVE}); existing files are kept")
    json_flag(verify, "print the result as JSON: ok, checked, first_bad_seq, reason")
    json_flag(export, "print the files written as a JSON list")
    for p, fn in ((tail, _tail), (verify, _verify), (export, _export)):
        p.add_argument("-c", "--config", default=os.environ.get("BUTLER_CONFIG"))
        agent_arg(p)
        p.set_defaults(handler=fn)


def _open(args: argparse.Namespace) -> AuditLog | None:
    config = load_or_exit(args.config, secrets=False, agent=args.agent,  # its data folder
                          as_json=args.json)
    if config is None:
        return None
    path = config.data_dir / "audit.db"
    if not path.exists():
        print(f"butler: no audit trail at {path}", file=sys.stderr)
        if args.json:
            print_json(error_json("no_audit_trail", f"no audit trail at {path}"))
        return None
    args.data_dir, args.loaded = config.data_dir, config
    return AuditLog(path)


def _tail(args: argparse.Namespace) -> int:
    log = _open(args)
    if log is None:
        return 2
    with log:
        for rec in log.tail(args.n):
            if args.json:
                print(json.dumps(rec.to_json(), ensure_ascii=False))
            else:
                chain = "->".join(rec.chain) or "-"
                print(f"{rec.seq:>6} {rec.at} {rec.kind:<18} {rec.decision:<10} "
                      f"{rec.code or '-':<18} caller={rec.caller} chain={chain} "
                      f"task={rec.task_id or '-'} trace={rec.trace_id or '-'}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    log = _open(args)
    if log is None:
        return 2
    with log:
        result = log.verify() if args.exports is None else \
            verify_history(log, Path(args.exports))
    # Every ended task in the receipt log exactly once, as its final record says.
    leaves = check_receipt_log(args.loaded)
    ok = result.ok and (leaves is None or leaves.ok)
    if args.json:
        print_json({"ok": ok, "checked": result.checked,
                    "first_bad_seq": result.first_bad_seq, "reason": result.reason or None,
                    "receipt_log_problems": None if leaves is None else leaves.problems})
        return 0 if ok else 1
    if result.ok:
        print(f"audit trail intact: {result.checked} record(s) verified")
    else:
        where = "" if result.first_bad_seq is None else f" at record {result.first_bad_seq}"
        print(f"audit trail TAMPERED{where}: {result.reason} "
              f"({result.checked} record(s) before it intact)")
    if leaves is not None and leaves.ok:
        print(f"receipt log: {leaves.audited} final record(s) name a leaf, each its task's, "
              "none twice")
    elif leaves is not None:
        print(f"receipt log does NOT match the audit trail: {len(leaves.problems)} "
              "problem(s)")
        print("\n".join(leaves.problems))
    return 0 if ok else 1


def _export(args: argparse.Namespace) -> int:
    log = _open(args)
    if log is None:
        return 2
    folder = Path(args.out) if args.out else args.data_dir / ARCHIVE
    with log:
        live = [s for s in segments(log) if not s.dropped]
        written = [str(export(log, segment, folder)) for segment in live]
    if args.json:
        print_json({"files": written})
        return 0
    for name in written:
        print(name)
    if not live:
        print("no sealed segment in the live log (retention exports them as it drops them)")
    return 0
