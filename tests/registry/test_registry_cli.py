"""``butler registry serve | find | list`` as separate processes, as an operator runs them."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from butler.registry.client import RegistryClient
from internal.http import hash_token
from tests.registry.registry_support import TOKENS, make_card

ROOT = Path(__file__).resolve().parents[2]


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUTLER_REGISTRY")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "butler.registry.cli", "registry", *args],
        cwd=ROOT, env=cli_env(**env), capture_output=True, text=True, timeout=30,
    )


def write_config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "registry.yaml"
    path.write_text(body, encoding="utf-8")
    return path


GOOD = f"""
registry:
  port: 0
  data_dir: state
  token_hashes:
    - {{sha256: {hash_token(TOKENS["alice"])}, name: alice}}
    - {hash_token(TOKENS["bob"])}
"""


@pytest.mark.parametrize(("body", "key"), [
    (GOOD + "  max_card_bytes: lots\n", "registry.max_card_bytes: expected an integer"),
    (GOOD + "  colour: red\n", "registry.colour: unknown key"),
    (GOOD + "  store: mysql://db\n", "registry.store: expected sqlite:PATH or redis://"),
    (GOOD + "  port: 70000\n", "registry.port: must be <= 65535"),
    ("registry:\n  token_hashes: [abc]\n",
     "registry.token_hashes[0]: expected a lowercase hex SHA-256"),
])
def test_bad_config_exits_2_with_one_line_naming_the_key(
    tmp_path: Path, body: str, key: str
) -> None:
    path = write_config(tmp_path, body)
    result = run_cli("serve", "-c", str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"{path}: {key}" in result.stderr


def test_missing_token_hashes_and_missing_file(tmp_path: Path) -> None:
    result = run_cli("serve", "-c", str(write_config(tmp_path, "registry:\n  port: 0\n")))
    assert result.returncode == 2
    assert "registry: token_hashes: at least one token hash is required" in result.stderr
    result = run_cli("serve", "-c", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2 and "cannot read" in result.stderr


@pytest.fixture(params=[signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    path = write_config(tmp_path, GOOD)
    proc = subprocess.Popen(
        [sys.executable, "-m", "butler.registry.cli", "registry", "serve", "-c", str(path)],
        cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("butler registry listening on http://127.0.0.1:"), line
        url = line.split()[4]
        assert str(tmp_path / "state" / "registry.db") in line
        yield url
        proc.send_signal(request.param)
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0
        assert "shutting down" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


async def _register(url: str) -> None:
    async with RegistryClient(url, TOKENS["alice"]) as client:
        await client.register("office", make_card(), ttl_seconds=600)
        await client.register("home", make_card("Home", caps=("echo",), skills=[]))


def test_find_and_list_against_a_live_registry(served: str) -> None:
    asyncio.run(_register(served))
    token = {"BUTLER_REGISTRY_TOKEN": TOKENS["bob"]}

    result = run_cli("find", "memory.search", "--url", served, **token)
    assert result.returncode == 0, result.stderr
    header, row, *rest = result.stdout.splitlines()
    assert header.split() == ["NAME", "URL", "CAPABILITIES", "EXPIRES", "IN"]
    assert row.split()[:3] == ["office", "http://127.0.0.1:8081", "memory.search"]
    # Ten minutes from registration, less what a busy machine took since.
    minutes, seconds = re.fullmatch(r".*  (\d+)m (\d+)s", row).groups()  # type: ignore[union-attr]
    assert 9 * 60 <= int(minutes) * 60 + int(seconds) <= 600 and rest == []

    result = run_cli("list", "--json", BUTLER_REGISTRY_URL=served, **token)
    assert [a["name"] for a in json.loads(result.stdout)] == ["home", "office"]

    result = run_cli("list", "-q", "office agent", "--url", served, **token)
    assert len(result.stdout.splitlines()) == 3  # both cards share the description

    result = run_cli("search", "office agent", "--federation", "none", "--url", served,
                     **token)
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["SCORE", "IDENTIFIER", "TYPE", "SOURCE"]
    assert sorted(r.split()[1] for r in rows) == ["urn:air:127.0.0.1:agent:home",
                                                  "urn:air:127.0.0.1:agent:office"]
    assert all(r.endswith("(local)") for r in rows)
    result = run_cli("search", "x", "--filter", "nope=1", "--url", served, **token)
    assert result.returncode == 1 and "INVALID_ARGUMENT" in result.stderr

    result = run_cli("find", "nothing.here", "--url", served, **token)
    assert result.returncode == 0
    assert result.stdout.strip() == "no live agents provide nothing.here"

    result = run_cli("find", "x", "--url", served, "--token-env", "MY_TOKEN",
                     MY_TOKEN="wrong")
    assert result.returncode == 1
    assert "401 unauthenticated" in result.stderr and "wrong" not in result.stderr


def test_find_and_list_with_a_token_file(served: str, tmp_path: Path) -> None:
    asyncio.run(_register(served))
    token_file = tmp_path / "registry.token"
    token_file.write_text(TOKENS["bob"] + "\n")
    result = run_cli("find", "memory.search", "--url", served, "--token-file", str(token_file))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].split()[0] == "office"
    result = run_cli("list", "--json", "--url", served, "--token-file", str(token_file))
    assert [a["name"] for a in json.loads(result.stdout)] == ["home", "office"]
    result = run_cli("list", "--url", served, "--token-file", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert result.stderr.startswith("butler: cannot read token file: ")


def test_find_without_url_or_token_exits_2() -> None:
    result = run_cli("find", "memory.search")
    assert result.returncode == 2 and "BUTLER_REGISTRY_URL" in result.stderr
    result = run_cli("find", "memory.search", "--url", "http://127.0.0.1:1")
    assert result.returncode == 2 and "BUTLER_REGISTRY_TOKEN" in result.stderr
