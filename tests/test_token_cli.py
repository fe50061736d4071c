"""``butler token new|hash`` as real subprocesses, checked against the real sha256sum,
and ``--help`` for every sub-command."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

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


def test_token_hash_takes_off_one_newline_only() -> None:
    token = b"7b1c0f5e9a2d4c6b8e0f1a3c5e7d9b2f"
    run = butler("token", "hash", stdin=token + b"\n\n")
    assert run.stdout.decode().strip() == sha256sum(token + b"\n")


@pytest.mark.parametrize(("stdin", "warned"), [
    (b"password\n", b"well-known weak token 'password'"),
    (b"123", b"well-known weak token '123'"),
    (b"0123456789abcdef0123456789abcde", b"at most 124 bits"),  # 31 hex digits
    (b"correct-horse", b"at most 78 bits"),
    (b"0123456789abcdef0123456789abcdef", b""),  # 32 hex digits: 128 bits
])
def test_token_hash_warns_on_weak_or_short_tokens(stdin: bytes, warned: bytes) -> None:
    run = butler("token", "hash", stdin=stdin)
    assert run.returncode == 0 and HEX64.fullmatch(run.stdout.decode().strip())
    if warned:
        assert b"warning" in run.stderr and warned in run.stderr, run.stderr
    else:
        assert run.stderr == b""


def test_check_config_warns_on_weak_and_published_hashes(tmp_path: Path) -> None:
    weak = sha256sum(b"password")
    strong = json.loads(butler("token", "new", "--json").stdout)["sha256"]
    path = tmp_path / "weak.yaml"
    path.write_text(f"configurations:\n  a2a:\n    enabled: true\n    token_hashes:\n"
                    f"      - {weak}\n      - {strong}\n      - {{sha256: {EXAMPLE}, name: x}}\n")
    run = butler("check-config", str(path))
    assert run.returncode == 0, run.stderr  # a warning, not a refusal
    lines = run.stderr.decode().strip().splitlines()
    assert len(lines) == 2, lines
    assert "token_hashes[0]: is the SHA-256 of the well-known weak token 'password'" in lines[0]
    assert "token_hashes[2]: is a hash published in Butler's examples" in lines[1]
    env = child_env(BUTLER_OFFICE_TOKEN="t", BUTLER_HOME_TOKEN="t")
    for example in ("examples/home.yaml", "examples/office.yaml", "config.example.yaml"):
        run = subprocess.run([sys.executable, "-m", "butler", "check-config", example],
                             capture_output=True, cwd=REPO, env=env, timeout=20)
        assert run.returncode == 0 and b"published in Butler's examples" in run.stderr, run


# The office token hash in examples/home.yaml.
EXAMPLE = "76fd1bcd9fb322e1aa5e87c93f35f3a97f0c6505e993835148b56cd7e4ee7f4c"


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


def test_card_help_says_no_token_is_sent_unless_named() -> None:
    run = butler("card", "--help")
    assert run.returncode == 0
    assert b"--token-env" in run.stdout and b"no token is" in run.stdout
