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

from butler.cli.remote import read_token, token_args
from butler.identity.receipt_check import verify_receipts
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
    verify.set_defaults(handler=_verify)


def _verify(args: argparse.Namespace) -> int:
    token = read_token(args)

    async def go() -> list[str]:
        guard = OutboundGuard(CONFIGURED)
        async with outbound_session(guard) as session:
            client = V2Transport(args.url, token, session=session, timeout=SECONDS, guard=guard)
            task = await client.request("GET", f"/v2/tasks/{quote(args.task_id, safe='')}")

            async def card_of(url: str) -> Mapping[str, Any]:
                reader = A2AClient(url, "", session=session, guard=guard, timeout=SECONDS)
                return await reader.card(time.monotonic() + SECONDS)

            tree = await verify_receipts(task if isinstance(task, dict) else {}, card_of)
            return tree.lines()

    try:
        lines = asyncio.run(go())
    except BadSignature as exc:  # before ButlerError, which it is
        print(f"butler: receipt_invalid: {exc.message}", file=sys.stderr)
        return 1
    except ButlerError as err:
        print(f"butler: {err.code}: {err.message}", file=sys.stderr)
        return 1
    print(f"receipts of task {args.task_id}: {len(lines)} verified")
    print("\n".join(lines))
    return 0
