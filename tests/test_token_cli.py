"""``butler token new|hash`` as real subprocesses, checked against the real sha256sum,
and ``--help`` for every sub-command."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys

import pytest

from butler.cli import build_parser, main
from tests.support import REPO, child_env

HEX64 = re.compile(r"[0-9a-f]{64}")


def butler(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "butler", *args], input=stdin,
                          capture_output=True, cwd=REPO, env=child_env(), timeout=20)


def sha256sum(data: bytes) -> str:
    """What ``echo -n TOKEN | sha256sum`` prints, from the real binary."""
    tool = shutil.which("sha256sum")
    if tool is None:
        pytest.skip("sha256sum is not installed")
    out = subprocess.run([tool], input=data, capture_output=True, check=True, timeout=10)
    return out.stdout.decode().split()[0]


def test_token_new_prints_a_random_token_and_its_hash() -> None:
    first, second = butler("token", "new"), butler("token", "new")
    tokens = []
    for run in (first, second):
        assert run.returncode == 0, run.stderr
        found = dict(re.findall(r"^(token|sha256):\s+([0-9a-f]+)", run.stdout.decode(), re.M))
        token, digest = found["token"], found["sha256"]
        assert HEX64.fullmatch(token), "32 random bytes as hex"
        assert digest == sha256sum(token.encode())
        tokens.append(token)
    assert tokens[0] != tokens[1]


def test_token_new_json() -> None:
    run = butler("token", "new", "--json")
    assert run.returncode == 0
    data = json.loads(run.stdout)
    assert set(data) == {"token", "sha256"}
    assert HEX64.fullmatch(data["token"])
    assert data["sha256"] == sha256sum(data["token"].encode())


@pytest.mark.parametrize("stdin", [b"s3cret-token", b"s3cret-token\n", b"s3cret-token\r\n"])
def test_token_hash_reads_stdin_like_echo_n_sha256sum(stdin: bytes) -> None:
    run = butler("token", "hash", stdin=stdin)
    assert run.returncode == 0, run.stderr
    assert run.stdout.decode().strip() == sha256sum(b"s3cret-token")


def test_token_hash_refuses_empty_stdin() -> None:
    run = butler("token", "hash", stdin=b"")
    assert run.returncode == 2
    assert b"no token" in run.stderr


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
              ) -> list[tuple[tuple[str, ...], str]]:
    """Every sub-command path with the one-line help its parent lists it with."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                found.append(((*prefix, name), helps.get(name, "")))
                found.extend(_commands(sub, (*prefix, name)))
    return found


COMMANDS = _commands(build_parser())


def test_the_foundation_commands_are_all_there() -> None:
    paths = {path for path, _ in COMMANDS}
    assert {("serve",), ("check-config",), ("token",), ("token", "new"), ("token", "hash"),
            ("card",), ("send",)} <= paths


@pytest.mark.parametrize(("path", "summary"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_has_help(path: tuple[str, ...], summary: str,
                                capsys: pytest.CaptureFixture[str]) -> None:
    assert summary.strip(), f"`butler {' '.join(path)}` has no summary in its parent's help"
    with pytest.raises(SystemExit) as info:
        main([*path, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: butler {' '.join(path)}")


@pytest.mark.parametrize("path", [("serve",), ("check-config",), ("token", "new"),
                                  ("token", "hash")])
def test_foundation_help_explains_every_argument(path: tuple[str, ...]) -> None:
    parser = build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    assert parser.description, f"`butler {' '.join(path)}` has no description"
    for action in parser._actions:
        assert action.help, f"`butler {' '.join(path)}`: {action.dest} has no help text"


def test_card_help_names_the_token_variable() -> None:
    run = butler("card", "--help")
    assert run.returncode == 0
    assert b"--token-env" in run.stdout and b"BUTLER_TOKEN" in run.stdout
