"""The CLI imports only what the command being run needs (issue 23, item 4): ``butler
--help`` and ``butler token new`` load no HTTP stack, YAML, tracing or daemon. Their speed
is measured in bench/cli_startup.py, not here."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from butler.cli import COMMANDS, build_parser
from tests.support import REPO, child_env

HEAVY = ("aiohttp", "yaml", "opentelemetry", "butler.daemon", "butler.config", "internal.http")

PROBE = """
import json, sys
from butler.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def modules_after(*argv: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                          cwd=REPO, env=child_env(), timeout=60, check=False)
    loaded: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return set(loaded)


@pytest.mark.parametrize("argv", [["--help"], ["token", "new"], ["--version"]])
def test_light_commands_import_nothing_heavy(argv: list[str]) -> None:
    loaded = modules_after(*argv)
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY or m in HEAVY
                   or any(m.startswith(h + ".") for h in HEAVY))
    assert heavy == [], heavy


def test_a_command_imports_its_module_only() -> None:
    loaded = modules_after("send", "--help")
    assert "butler.cli.remote" in loaded
    assert "butler.daemon" not in loaded and "butler.cli.serve" not in loaded


def _help_lines(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {choice.dest: choice.help for choice in action._choices_actions}


def test_the_help_lines_in_the_table_are_the_commands_own() -> None:
    full = _help_lines(build_parser())
    listed = _help_lines(build_parser(lambda module: False))
    assert list(full) == list(listed) == list(COMMANDS)
    assert full == listed


def test_version() -> None:
    done = subprocess.run([sys.executable, "-m", "butler", "--version"], capture_output=True,
                          text=True, cwd=REPO, env=child_env(), timeout=60, check=False)
    assert done.returncode == 0
    assert done.stdout.startswith("butler ") and done.stdout.strip() != "butler unknown"
