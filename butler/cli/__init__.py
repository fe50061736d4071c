"""``butler``: the command line. Each sub-command lives in its own module.

Only the module of the command being run is imported: the others are listed in the help
from ``COMMANDS`` alone, so ``butler --help`` and ``butler token new`` do not load the HTTP
stack, the config loader or the daemon, whose imports would be most of their time.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

# command -> (module, its add_parsers function, its line in `butler --help`), in help order.
# tests/test_cli_startup.py checks these lines against the modules' own.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "serve": ("butler.cli.serve", "add_parsers", "run the daemon"),
    "check-config": ("butler.cli.serve", "add_parsers",
                     "validate a config file without starting"),
    "token": ("butler.cli.token", "add_parsers",
              "generate bearer tokens and their SHA-256 hashes"),
    "card": ("butler.cli.card_cmd", "add_parsers",
             "show any A2A agent's card: interfaces, skills, extensions, security, signature"),
    "send": ("butler.cli.remote", "add_parsers", "submit a task and follow it until it ends"),
    "tasks": ("butler.cli.remote", "add_parsers",
              "list, show, cancel, watch or answer tasks on a Butler"),
    "agents": ("butler.cli.agents_cmd", "add_parsers",
               "list, add or remove the agents a daemon hosts"),
    "top": ("butler.cli.top", "add_parsers",
            "a live view of running and recent tasks and their delegation trees"),
    "audit": ("butler.cli.audit_cmd", "add_parsers", "show or verify the audit trail"),
    "receipt": ("butler.cli.receipt_cmd", "add_parsers",
                "verify a task's signed receipts and show its cost tree"),
    "key": ("butler.cli.key_cmd", "add_parsers", "show or rotate this agent's identity key"),
    "spend": ("butler.cli.spend_cmd", "add_parsers",
              "show each limited caller's spending (last hour, last day) and its limits"),
    "delegate": ("butler.cli.delegate_cmd", "add_parsers",
                 "delegate a task to a peer as this instance"),
    "route": ("butler.cli.route_cmd", "add_parsers",
              "show which skill or peer a task in plain words would go to"),
    "doctor": ("butler.cli.doctor", "add_parsers",
               "check a config end to end and say what to fix"),
    "demo": ("butler.cli.demo", "add_parsers",
             "run two instances on loopback and delegate between them"),
    "stdio": ("butler.cli.edges", "add_parsers",
              "serve A2A JSON-RPC on stdin/stdout, one request per line"),
    "mcp": ("butler.cli.edges", "add_parsers",
            "serve the skills and the swarm as MCP tools on stdin/stdout"),
    "registry": ("butler.registry.cli", "add_registry_parser", "run or query an agent registry"),
    "completion": ("butler.cli.completion", "add_parsers",
                   "print a shell completion script (bash or zsh)"),
}


class _Version(argparse.Action):
    """``--version``, read from the installed package only when asked for."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("butler-a2a")
        except PackageNotFoundError:  # run from a checkout that was never installed
            number = "unknown"
        print(f"butler {number}")
        parser.exit()


def build_parser(load: Callable[[str], bool] = lambda module: True) -> argparse.ArgumentParser:
    """``load(module)``: whether to import that module for the full parsers of its
    commands; the others' commands get only their help line."""
    parser = argparse.ArgumentParser(
        prog="butler", description="Peer-to-peer A2A delegation daemon with swarm safety.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command, (module, function, help_text) in COMMANDS.items():
        if command in sub.choices:
            continue  # added with another command of its module
        if load(module):
            add: Callable[[SubParsers], None] = getattr(importlib.import_module(module),
                                                        function)
            add(sub)
        else:
            sub.add_parser(command, help=help_text)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The command word: the first argument that is not an option (none take values)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    wanted = COMMANDS.get(_command(args_in) or "", ("",))[0]
    parser = build_parser(lambda module: module == wanted)
    args = parser.parse_args(args_in)
    try:
        result: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    sys.stdout.flush()
    return result
