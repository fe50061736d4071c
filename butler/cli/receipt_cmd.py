"""``butler receipt verify URL TASK_ID``: a task's signed receipts, checked as one tree
against each signer's card, and its cost tree; exit 1 on anything that does not check.

The task is read with the caller's token; each signer's card is read without one (it is
public), through the same outbound guard (docs/receipts.md)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from butler.cli.json_output import error_json, json_flag, print_json
from butler.cli.remote import read_token, token_args
from butler.identity.receipt_check import Receipt, verify_receipts
from internal.http import CONFIGURED, OutboundGuard, outbound_session
from internal.protocol.a2a.client import A2AClient, V2Transport
from internal.protocol.a2a.model import ButlerError
from internal.signing import BadSignature

SECONDS = 30.0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    receipt = sub.add_parser("receipt", help="verify a task's signed receipts and show its "
                                             "cost tree")
    rsub = receipt.add_subparsers(dest="receipt_command", metavar="ACTION", required=True)
    verify = rsub.add_parser("verify", help="check every receipt of a task's delegation tree "
                                            "against its signer's card; exit 1 on any edit")
    verify.add_argument("url", help="the Butler's base URL")
    verify.add_argument("task_id", help="the task's id, as POST /v2/tasks returned it")
    token_args(verify, json=False)
    json_flag(verify, "print the verified tree as JSON (claims, signing key, hops below)")
    verify.set_defaults(handler=_verify)


def _verify(args: argparse.Namespace) -> int:
    token = read_token(args)

    async def go() -> Receipt:
        guard = OutboundGuard(CONFIGURED)
        async with outbound_session(guard) as session:
            client = V2Transport(args.url, token, session=session, timeout=SECONDS, guard=guard)
            task = await client.request("GET", f"/v2/tasks/{quote(args.task_id, safe='')}")

            async def card_of(url: str) -> Mapping[str, Any]:
                reader = A2AClient(url, "", session=session, guard=guard, timeout=SECONDS)
                return await reader.card(time.monotonic() + SECONDS)

            return await verify_receipts(task if isinstance(task, dict) else {}, card_of)

    try:
        tree = asyncio.run(go())
    except ButlerError as err:
        code = "receipt_invalid" if isinstance(err, BadSignature) else err.code
        print(f"butler: {code}: {err.message}", file=sys.stderr)
        if args.json:
            print_json({"ok": False, "task_id": args.task_id, **error_json(code, err.message)})
        return 1
    lines = tree.lines()
    if args.json:
        print_json({"ok": True, "task_id": args.task_id, "receipts": len(lines),
                    "tree": tree.to_json()})
        return 0
    print(f"receipts of task {args.task_id}: {len(lines)} verified")
    print("\n".join(lines))
    return 0
