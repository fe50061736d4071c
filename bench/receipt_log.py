"""The receipt log's sizes and costs (docs/receipts.md#the-receipt-log): a log grown to
each size in groups of ``--group`` (as commits make them), then, for receipts of the last
group: bytes per receipt, hashes per proof, and the time to verify one (the head's Ed25519
signature and the inclusion proof), and to append a group (its nodes and its one head).

    .venv/bin/python bench/receipt_log.py --sizes 1000,100000,1000000 --group 64
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
from dataclasses import replace

from butler.identity.receipt_log import LOG_TABLES, ReceiptLog
from butler.identity.receipts import Sealing, parse_logged, verify_receipt
from internal.protocol.a2a.model import Task, TaskRequest, TaskState
from internal.signing import IdentityKey

AT = "2026-11-28T00:00:00.000000Z"


def _claims(i: int) -> dict[str, object]:
    return {"receipt_id": f"r-{i:032x}", "agent": "office", "url": "http://office:8081",
            "task_id": f"{i:032x}", "state": "completed",
            "digest": "sha256:47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU",
            "cost_usd": "0", "total_usd": "0", "spent_usd": "0", "budget_left_usd": "5.00",
            "trace_id": f"{i:032x}", "children": [], "at": AT}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,100000")
    ap.add_argument("--group", type=int, default=64)
    args = ap.parse_args()
    key = IdentityKey.generate()
    log = ReceiptLog("office", lambda: key)
    task = Task(id="t", context_id="c", owner="o", state=TaskState.COMPLETED,
                request=TaskRequest(), created_at=AT, updated_at=AT)
    conn = sqlite3.connect(":memory:", isolation_level=None)
    for statement in LOG_TABLES:
        conn.execute(statement)
    print(f"{'size':>10} {'bytes/receipt':>14} {'proof hashes':>13} {'verify µs':>10} "
          f"{'append µs/group':>16}")
    size = 0
    for target in (int(s) for s in args.sizes.split(",")):
        appends: list[float] = []
        group: list[Sealing] = []
        while size < target:
            n = min(args.group, target - size)
            group = [Sealing(replace(task, id=str(size + i)), _claims(size + i))
                     for i in range(n)]
            started = time.perf_counter()
            conn.execute("BEGIN")
            log.append_group(conn, group)
            conn.execute("COMMIT")
            appends.append(time.perf_counter() - started)
            size += n
        receipts = [s.receipt for s in group]
        verify = []
        for receipt in receipts * 20:
            started = time.perf_counter()
            verify_receipt(receipt, key.public)
            verify.append(time.perf_counter() - started)
        print(f"{size:>10} {statistics.mean(len(r) for r in receipts):>14.0f} "
              f"{statistics.mean(len(parse_logged(r).proof) for r in receipts):>13.1f} "
              f"{statistics.median(verify) * 1e6:>10.0f} "
              f"{statistics.median(appends[-100:]) * 1e6:>16.0f}")


if __name__ == "__main__":
    main()
