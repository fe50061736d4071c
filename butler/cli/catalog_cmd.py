"""``butler catalog [URL | -c CONFIG]``: print and check an AI Catalog (ARD v0.9), this
daemon's own or anyone's.

The catalog is fetched as a registry crawls one (through the outbound guard, no
redirect followed, size and nesting capped) and each entry is checked as a registry
would check it: the entry's fields, its publisher against the host it came from, its
signature against the key it names. No token is ever sent: a catalog is public.
Exit 0 when every entry passes, 1 when any does not or the catalog cannot be read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

import aiohttp
from yarl import URL

from internal.http import CONFIGURED, OutboundGuard, outbound_session, read_capped
from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.model import ButlerError

if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

CATALOG_PATH = "/.well-known/ai-catalog.json"
MAX_BYTES = 4 * 1024 * 1024
TIMEOUT_SECONDS = 30.0


def add_parsers(sub: SubParsers) -> None:
    cmd = sub.add_parser("catalog", help="print and check an AI catalog (ARD), this "
                                         "daemon's or anyone's")
    cmd.add_argument("url", nargs="?", help="a host's base URL or the catalog's own URL "
                     "(default: this daemon's, from -c)")
    cmd.add_argument("-c", "--config", metavar="FILE", help="the daemon's config: check its "
                     "own catalog")
    cmd.add_argument("--json", action="store_true", help="print the catalog as served")
    cmd.set_defaults(handler=_catalog)


def catalog_url(given: str) -> str:
    url = URL(given)
    return str(url.with_path(CATALOG_PATH)) if url.path in ("", "/") else given


def _target(args: argparse.Namespace) -> str | None:
    if args.url:
        return catalog_url(args.url) if args.url.startswith(("http://", "https://")) else None
    if not args.config:
        return None
    from butler.config.loader import load_config
    from butler.config.model import http_url

    cfg = load_config(args.config)
    base = cfg.agent.url or http_url(cfg.a2a.bind_address, cfg.a2a.port,
                                     tls=cfg.a2a.tls is not None)
    return catalog_url(base)


async def fetch(url: str) -> Any:
    async with outbound_session(OutboundGuard(CONFIGURED)) as session, session.get(
            url, headers={"Accept": "application/json"}, allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=TIMEOUT_SECONDS)) as resp:
        raw = await read_capped(resp.content.iter_chunked(64 * 1024), MAX_BYTES,
                                announced=resp.content_length)
        if resp.status != 200:
            raise OSError(f"{url} answered HTTP {resp.status}")
    return exact_json.loads(raw, max_depth=32)


def _catalog(args: argparse.Namespace) -> int:
    from butler.registry.catalog_entry import review_catalog
    from butler.registry.cli import print_rows

    url = _target(args)
    if url is None:
        print("butler: give a URL (with http:// or https://) or -c CONFIG", file=sys.stderr)
        return 2
    try:
        document = asyncio.run(fetch(url))
        verdicts = review_catalog(document, URL(url).raw_host or "")
    except (ButlerError, OSError, aiohttp.ClientError, TimeoutError) as exc:
        reason = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        print(f"butler: {url}: {reason}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(document, indent=2, ensure_ascii=False, default=str))
    else:
        print_rows([("IDENTIFIER", "TYPE", "CHECK"), *verdicts], out=sys.stdout)
    problems = sum(v.startswith("problem") for _, _, v in verdicts)
    print(f"{url}: {len(verdicts)} entries, {problems} with problems", file=sys.stderr)
    return 1 if problems else 0
