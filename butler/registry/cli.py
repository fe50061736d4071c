"""``butler registry serve | find | list | search``.

The main CLI calls ``add_registry_parser`` on its subparsers and hands parsed arguments
whose command is ``registry`` to ``run_registry_command``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TextIO

from butler.config.node import ConfigError
from butler.registry.client import RegistryClient, RegistryError
from butler.registry.clock import SystemClock
from butler.registry.config import RegistryServiceConfig, load_registry_config
from butler.registry.model import AgentEntry
from butler.registry.service import start_registry
from butler.registry.store_url import open_store, store_folder
from butler.runtime.heap import settle_heap
from butler.storage.data_folder import hold_data_folder
from internal.protocol.a2a.model import SetupError

URL_ENV = "BUTLER_REGISTRY_URL"
BEARER_ENV = "BUTLER_REGISTRY_TOKEN"
MAX_RESULTS = 1000
_MAX_CELL = 60


def add_registry_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reg = subparsers.add_parser("registry", help="run or query an agent registry")
    sub = reg.add_subparsers(dest="registry_command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="run the registry service")
    serve.add_argument("-c", "--config", required=True, metavar="FILE",
                       help="registry YAML config")
    find = sub.add_parser("find", help="live agents that provide a capability")
    find.add_argument("capability", metavar="CAPABILITY")
    listing = sub.add_parser("list", help="all live agents")
    listing.add_argument("-q", "--text", help="only agents whose names or descriptions "
                         "contain these words")
    search = sub.add_parser("search", help="ARD search: catalog entries ranked by relevance "
                            "to a text, from this registry and the ones it federates with")
    search.add_argument("text", metavar="TEXT")
    search.add_argument("--federation", choices=("auto", "referrals", "none"), default="auto",
                        help="ask upstream registries too (auto), list them (referrals), or "
                        "not (none); default auto")
    search.add_argument("--filter", action="append", default=[], metavar="PATH=VALUE",
                        help="only entries with VALUE at PATH (type, tags, capabilities, "
                        "publisher, trustManifest.*...); repeat for more")
    search.add_argument("--limit", type=int, default=10, help="results to show (1-100)")
    for p in (find, listing, search):
        p.add_argument("--url", help=f"registry URL (default: ${URL_ENV})")
        p.add_argument("--token-env", default=BEARER_ENV, metavar="VAR",
                       help=f"environment variable holding the bearer token "
                       f"(default: {BEARER_ENV})")
        p.add_argument("--token-file", metavar="FILE", help="read the bearer token from FILE")
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    reg.set_defaults(handler=run_registry_command)


def run_registry_command(args: argparse.Namespace) -> int:
    if args.registry_command == "serve":
        return _serve_command(args.config)
    url = args.url or os.environ.get(URL_ENV, "")
    if not url:
        return _fail(f"no registry URL: pass --url or set {URL_ENV}")
    if args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            return _fail(f"cannot read token file: {exc.strerror}")
    else:
        token = os.environ.get(args.token_env, "").strip()
    if not token:
        return _fail(f"no registry token: set the environment variable {args.token_env} "
                     "(or use --token-file)")
    if args.registry_command == "search":
        return _search_command(args, url, token)
    capability = args.capability if args.registry_command == "find" else None
    text = getattr(args, "text", None)
    try:
        entries = asyncio.run(_find(url, token, capability=capability, text=text))
    except (RegistryError, ValueError) as exc:
        return _fail(str(exc), code=1)
    if args.json:
        now = time.time()
        print(json.dumps([e.to_json(now) for e in entries], indent=2, ensure_ascii=False))
    elif not entries:
        print(f"no live agents provide {capability}" if capability else "no live agents")
    else:
        print_table(entries, now=time.time(), out=sys.stdout)
    if len(entries) >= MAX_RESULTS:
        print(f"butler: showing the first {MAX_RESULTS} agents; there may be more",
              file=sys.stderr)
    return 0


async def _find(url: str, token: str, *, capability: str | None,
                text: str | None) -> list[AgentEntry]:
    async with RegistryClient(url, token) as client:
        return await client.find(capability=capability, text=text, max_results=MAX_RESULTS)


def print_table(entries: Sequence[AgentEntry], *, now: float, out: TextIO) -> None:
    rows = [("NAME", "URL", "CAPABILITIES", "EXPIRES IN")]
    rows += [(e.name, e.url, ", ".join(e.capabilities) or "-",
              _duration(e.expires_at - now)) for e in entries]
    print_rows(rows, out=out)


def print_rows(rows: Sequence[Sequence[str]], *, out: TextIO) -> None:
    """Columns padded to their widest cell, the last one as it is."""
    rows = [[*(_cell(c) for c in row[:-1]), _cell(row[-1], whole=True)] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        out.write("  ".join([*cells, row[-1]]).rstrip() + "\n")


def _search_command(args: argparse.Namespace, url: str, token: str) -> int:
    filters: dict[str, list[str]] = {}
    for item in args.filter:
        path, sep, value = item.partition("=")
        if not sep or not path:
            return _fail(f"--filter {item!r}: expected PATH=VALUE")
        filters.setdefault(path, []).append(value)
    if not 1 <= args.limit <= 100:
        return _fail("--limit: expected 1 to 100")

    async def ask() -> dict[str, Any]:
        async with RegistryClient(url, token) as client:
            return await client.search(args.text, filters=filters,
                                       federation=args.federation, page_size=args.limit)

    try:
        answer = asyncio.run(ask())
    except (RegistryError, ValueError) as exc:
        return _fail(str(exc), code=1)
    if args.json:
        print(json.dumps(answer, indent=2, ensure_ascii=False, default=str))
        return 0
    results = answer.get("results") or []
    rows = [("SCORE", "IDENTIFIER", "TYPE", "SOURCE")]
    rows += [(str(r.get("score")), str(r.get("identifier")), str(r.get("type")),
              f"{r.get('source')} ({r.get('sourceTrust', '?')})")
             for r in results if isinstance(r, dict)]
    if len(rows) > 1:
        print_rows(rows, out=sys.stdout)
    else:
        print("nothing found")
    for ref in answer.get("referrals") or []:
        if isinstance(ref, dict):
            print(f"also ask: {_cell(str(ref.get('displayName')))} at "
                  f"{_cell(str(ref.get('url')))}")
    return 0


def _cell(text: str, *, whole: bool = False) -> str:
    # Cards are validated, but a table must never let a value rewrite the terminal.
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if whole or len(text) <= _MAX_CELL else text[: _MAX_CELL - 1] + "…"


def _duration(seconds: float) -> str:
    s = max(0, int(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 60}m {s % 60}s" if s >= 60 else f"{s}s"


def _fail(message: str, *, code: int = 2) -> int:
    print(f"butler: {message}", file=sys.stderr)
    return code


def _serve_command(path: str) -> int:
    try:
        config = load_registry_config(path)
    except ConfigError as exc:
        return _fail(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return asyncio.run(serve(config))
    except KeyboardInterrupt:  # interrupted before the signal handlers were installed
        return 0


async def serve(config: RegistryServiceConfig) -> int:
    """Run until SIGINT or SIGTERM, then shut down cleanly and return 0. A start that
    fails stops what had started, prints one line and returns 2."""
    async with AsyncExitStack() as stack:
        try:
            folder = store_folder(config.store)
            if folder is not None:
                # Before the store opens: a second registry on it must touch nothing.
                # The operator chose that folder: made private if new, not tightened if not.
                stack.enter_context(hold_data_folder(folder, tighten=False))
        except (SetupError, OSError) as exc:
            return _fail(f"cannot start: {exc}")
        try:
            store = await open_store(config.store)
        except Exception as exc:
            return _fail(f"cannot start: cannot open store {config.store_display}: {exc}")
        stack.push_async_callback(store.close)
        try:
            running = await start_registry(config, store, SystemClock())
        except OSError as exc:
            return _fail(f"cannot start: {exc}")
        stack.push_async_callback(running.close)
        settle_heap()
        host, port = running.address
        print(f"butler registry listening on http://{host}:{port} "
              f"(store: {config.store_display})", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        print("butler registry: shutting down", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="butler")
    add_registry_parser(parser.add_subparsers(dest="command", required=True))
    return run_registry_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
