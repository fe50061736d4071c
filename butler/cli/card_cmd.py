"""``butler card URL``: inspect any A2A agent's public card, a Butler's or anyone's.

The card is read the way a Butler reads a peer's before delegating to it
(``A2AClient.card``: ``/.well-known/agent-card.json``, else the pre-0.3
``agent.json``), through the same outbound guard. No token is sent unless one is named
with ``--token-env`` or ``--token-file``: this command points at agents nobody
configured, and a token goes only where it was meant to go.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import TYPE_CHECKING

from butler.cli.card_view import describe_card
from internal.http import CONFIGURED, OutboundGuard, outbound_session
from internal.protocol.a2a.client import A2AClient
from internal.protocol.a2a.model import ButlerError

if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

TIMEOUT_SECONDS = 30.0


def add_parsers(sub: SubParsers) -> None:
    card = sub.add_parser("card", help="show any A2A agent's card: interfaces, skills, "
                                       "extensions, security, signature")
    card.add_argument("url", help="the agent's base URL, e.g. http://127.0.0.1:8081")
    card.add_argument("--token-env", metavar="VAR",
                      help="send the bearer token in VAR (by default no token is sent)")
    card.add_argument("--token-file", metavar="FILE", help="send the bearer token in FILE")
    card.add_argument("--json", action="store_true", help="print the card as the agent sent it")
    card.set_defaults(handler=_card)


def _token(args: argparse.Namespace) -> str:
    if args.token_file or args.token_env:
        from butler.cli.remote import read_token

        return read_token(args)
    return ""


def _card(args: argparse.Namespace) -> int:
    if not args.url.startswith(("http://", "https://")):
        print(f"butler: {args.url!r} is not a URL: give the scheme too, e.g. "
              f"http://{args.url}", file=sys.stderr)
        return 2
    token = _token(args)

    async def fetch() -> dict[str, object]:
        guard = OutboundGuard(CONFIGURED)
        async with outbound_session(guard) as session:
            client = A2AClient(args.url, token, session=session, guard=guard,
                               timeout=TIMEOUT_SECONDS)
            return await client.card(time.monotonic() + TIMEOUT_SECONDS)

    try:
        card = asyncio.run(fetch())
    except ButlerError as err:
        print(f"butler: {err.code}: {err.message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(card, indent=2, ensure_ascii=False, default=str))
    else:
        print("\n".join(describe_card(card)))
    return 0

