"""``butler``: the command line. Each sub-command lives in its own module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from butler.cli.audit_cmd import add_parsers as add_audit
from butler.cli.delegate_cmd import add_parsers as add_delegate
from butler.cli.demo import add_parsers as add_demo
from butler.cli.remote import add_parsers as add_remote
from butler.cli.serve import add_parsers as add_serve
from butler.cli.token import add_parsers as add_token


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="butler", description="Peer-to-peer A2A delegation daemon with swarm safety.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_serve(sub)
    add_token(sub)
    add_remote(sub)
    add_audit(sub)
    add_delegate(sub)
    add_demo(sub)
    _add_registry(sub)
    return parser


def _add_registry(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    try:
        from butler.registry.cli import add_registry_parser
    except ImportError:  # the registry package is optional at build time
        return
    add_registry_parser(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    sys.stdout.flush()
    return result
