"""The CLI imports only what the command being run needs (issue 23, item 4): ``butler
--help`` and ``butler token new`` load no HTTP stack, YAML, tracing or daemon. Their speed
is measured in bench/cli_startup.py, not here."""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from butler.cli import COMMANDS, build_parser
from tests.support import REPO, Swarm, child_env, sample_skills

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


# What a client command never needs: the server side, YAML, tracing, the other wires.
SERVER_SIDE = ("aiohttp.web", "yaml", "opentelemetry", "butler.config", "butler.daemon",
               "internal.protocol.a2a.server", "internal.protocol.a2a.codec.a2a_v1",
               "internal.protocol.a2a.codec.a2a_v03", "internal.http._documents")


# What the commands that talk to a Butler never need: their client is the blocking one
# (internal/protocol/a2a/client/_blocking.py), with no event loop and no aiohttp.
NO_LOOP = (*SERVER_SIDE, "aiohttp", "asyncio", "internal.protocol.a2a.client._butler")


def _heavy(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in names))


def test_send_loads_the_client_side_only() -> None:
    loaded = modules_after("send", "--help")
    assert "internal.protocol.a2a.client._blocking" in loaded
    assert "internal.protocol.a2a.client._exchange" in loaded
    assert "internal.http._outbound_guard" in loaded
    assert _heavy(loaded, NO_LOOP) == []


async def test_talking_to_a_butler_loads_neither_aiohttp_nor_asyncio(swarm: Swarm) -> None:
    """Run for real against a daemon (submit, follow the events, read the task), not only
    parsed: what is imported on first use counts too."""
    home = await swarm.start("home", skills=sample_skills())
    token = home.tokens["operator"]
    send = await modules_after_run(token, "send", home.url, "hi", "--skill", "echo")
    assert "internal.protocol.a2a.client._blocking" in send
    assert _heavy(send, NO_LOOP) == []
    for argv in (["tasks", "list", home.url], ["top", home.url, "--once"]):
        assert _heavy(await modules_after_run(token, *argv), NO_LOOP) == [], argv


async def modules_after_run(token: str, *argv: str) -> set[str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PROBE, *argv, cwd=REPO, env=child_env(BUTLER_TOKEN=token),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err
    assert out.strip() and b"Traceback" not in err, err  # the command did its work
    loaded: list[str] = json.loads(err.decode().strip().splitlines()[-1])
    return set(loaded)


@pytest.mark.parametrize("package", ["internal.http", "internal.protocol.a2a.client"])
def test_lazy_packages_export_what_they_declare(package: str) -> None:
    """``internal/lazy_exports.py``: the names type checkers see (imports under
    TYPE_CHECKING) are the names ``__all__`` lists, each from the module it names."""
    module = importlib.import_module(package)
    source = Path(module.__file__ or "").read_text(encoding="utf-8")
    declared: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package):
            declared.update({alias.name: node.module for alias in node.names})
    assert sorted(declared) == sorted(module.__all__)
    for name, origin in declared.items():
        assert getattr(module, name) is getattr(importlib.import_module(origin), name)


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
