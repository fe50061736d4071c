"""``butler delegate``: send a task to a peer as this instance, and show the hops.

A configured peer is held to its pinned key as the daemon holds it (``peer_identity``): its
card is read without the token and checked first, and its answer's receipt after; a peer
named by URL only has no pin."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

from butler.cli.json_output import error_json, json_flag, print_json
from butler.cli.remote import read_token
from butler.cli.render import print_task
from butler.cli.serve import load_or_exit
from butler.delegation.peer_identity import PINS_FILE, PeerIdentities, PinStore
from butler.delegation.peers import Candidate
from internal.http import CONFIGURED, OutboundGuard, outbound_session
from internal.protocol.a2a.client import A2AClient, V2Transport
from internal.protocol.a2a.codec.butler_v2 import decode_money, encode_task
from internal.protocol.a2a.model import ButlerError, Task, TaskRequest


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "delegate", help="delegate a task to a peer as this instance",
        description="Sends TASK to a peer (by its name in the config, or a URL) with this "
                    "instance's id as the caller chain and its budget, follows it, then prints "
                    "the result, the hops with their costs and the trace id.")
    p.add_argument("task")
    p.add_argument("--peer", required=True, help="peer name from the config, or a URL")
    p.add_argument("--capability", action="append", default=[], help="capability needed")
    p.add_argument("--budget", help="USD budget (default: swarm.budget_usd)")
    p.add_argument("-c", "--config", default=os.environ.get("BUTLER_CONFIG"))
    p.add_argument("--token-env", default="BUTLER_TOKEN",
                   help="variable holding the token when --peer is a URL not in the config")
    p.add_argument("--token-file")
    json_flag(p, "print the final task as JSON (progress stays on stderr)")
    p.set_defaults(handler=_delegate)


def _delegate(args: argparse.Namespace) -> int:
    config = load_or_exit(args.config, as_json=args.json)
    if config is None:
        return 2
    peer = next((p for p in config.peers if args.peer in (p.name, p.url)), None)
    url = peer.url if peer else args.peer
    if peer is None and not url.startswith(("http://", "https://")):
        message = f"no peer named {args.peer!r} in {config.source}"
        print(f"butler: {message}", file=sys.stderr)
        if args.json:
            print_json(error_json("unknown_peer", message))
        return 2
    token = peer.token if peer else read_token(args)
    budget = decode_money(args.budget, "--budget") if args.budget else config.swarm.budget_usd
    request = TaskRequest(text=args.task, capabilities_needed=tuple(args.capability),
                          blocking=False)

    async def go() -> int:
        guard = OutboundGuard(CONFIGURED)
        async with outbound_session(guard) as session:
            timeout = peer.timeout_seconds if peer else 300
            client = V2Transport(url, token, session=session, name=peer.name if peer else url,
                                 timeout=timeout, guard=guard)

            async def read_card() -> dict[str, Any]:
                reader = A2AClient(url, "", session=session, guard=guard, timeout=timeout)
                return await reader.card(time.monotonic() + timeout)

            async def send(card: dict[str, Any] | None) -> Task:
                return await client.submit(request, chain=(config.agent.id,), budget=budget)

            identities = cand = None
            if peer is not None:
                identities = PeerIdentities(PinStore(config.data_dir / PINS_FILE))
                cand = Candidate(peer.name, url, token, tuple(peer.capabilities))
            task = await (send(None) if identities is None or cand is None
                          else identities.guarded(cand, read_card, send))
            print(f"delegated to {client.name}: task {task.id}", file=sys.stderr)
            async for name, data in client.events(task.id):
                if name == "status":
                    print(f"  {data['state']} {data['status'].get('message', '')}",
                          file=sys.stderr)
            final = await client.get(task.id)
            if identities is not None and cand is not None:
                await identities.answered(cand, final.receipts, read_card)
            if args.json:
                print_json(encode_task(final))
            else:
                print_task(final)
            return 0 if final.state.value == "completed" else 1

    try:
        return asyncio.run(go())
    except ButlerError as err:
        print(f"butler: {err.code}: {err.message}", file=sys.stderr)
        if args.json:
            print_json(error_json(err.code, err.message))
        return 1
