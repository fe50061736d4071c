"""``butler completion bash|zsh``: the scripts the CLI prints, loaded into real shells and
asked what they complete (the shells' completion entry points called as Tab would)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from butler.cli import COMMANDS, build_parser
from butler.cli.completion import walk
from tests.support import run_cli

# Each case: the words typed (the last one being completed), what must be offered.
CASES = [
    (["ta"], {"tasks"}),
    ([""], set(COMMANDS)),
    (["tasks", ""], {"list", "get", "cancel", "watch", "answer"}),
    (["tasks", "list", "--"], {"--state", "--limit", "--cursor", "--token-file", "--json"}),
    (["top", "--interval", "2", "--"], {"--config", "--once", "--token-env"}),
    (["completion", ""], {"bash", "zsh"}),
    (["registry", "find", "--"], {"--url", "--token-file"}),
]

BASH_DRIVER = """
source "$1"
comp() {{ COMP_WORDS=("$@"); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); COMPREPLY=(); _butler;
         echo "${{COMPREPLY[*]}}"; }}
{calls}
"""

# Outside a completion widget: compadd and _files print what they were given.
ZSH_DRIVER = """
compdef() {{ : }}
compadd() {{ shift; print -r -- "$*" }}
_files() {{ print -r -- "<files>" }}
source "$1"
comp() {{ words=("$@"); CURRENT=${{#words}}; _butler }}
{calls}
"""


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


async def _offered(shell: str, driver: str, script: Path, cases: list[list[str]]) -> list[set[str]]:
    calls = "\n".join("comp butler " + " ".join(_quote(w) for w in words) for words in cases)
    program = script.with_suffix(".driver")
    program.write_text(driver.format(calls=calls))
    args = ["-f"] if shell == "zsh" else ["--norc", "--noprofile"]
    proc = await asyncio.create_subprocess_exec(
        shell, *args, str(program), str(script), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0 and not err, err.decode()
    lines = out.decode().splitlines()
    assert len(lines) == len(cases), lines
    return [set(line.split()) for line in lines]


async def _script(shell: str, tmp_path: Path) -> Path:
    code, out, err = await run_cli("completion", shell)
    assert code == 0, err
    path = tmp_path / f"butler.{shell}"
    path.write_text(out)
    return path


async def test_bash_completes_commands_options_and_files(tmp_path: Path) -> None:
    script = await _script("bash", tmp_path)
    (tmp_path / "home.yaml").write_text("")
    cases = [words for words, _ in CASES] + [["top", "-c", str(tmp_path / "ho")]]
    offered = await _offered("bash", BASH_DRIVER, script, cases)
    for (words, expected), got in zip(CASES, offered, strict=False):
        assert expected <= got, (words, got)
    assert offered[-1] == {str(tmp_path / "home.yaml")}  # -c takes a file name
    # An option's value is not a command: "--interval 2" leaves the path at "top".
    assert not {"list", "tasks"} & offered[4]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
async def test_zsh_completes_commands_options_and_files(tmp_path: Path) -> None:
    script = await _script("zsh", tmp_path)
    assert script.read_text().startswith("#compdef butler\n")  # loadable from $fpath
    cases = [words for words, _ in CASES] + [["top", "-c", "x"]]
    offered = await _offered("zsh", ZSH_DRIVER, script, cases)
    for (words, expected), got in zip(CASES, offered, strict=False):
        assert expected <= got, (words, got)
    assert offered[-1] == {"<files>"}


def test_the_words_come_from_the_parsers() -> None:
    """Nothing is listed by hand: a command or option added to the CLI is completed."""
    tree = walk(build_parser())
    assert tree[""].commands == list(COMMANDS)
    assert set(tree["tasks"].commands) == {"list", "answer", "get", "cancel", "watch"}
    assert "--token-file" in tree["send"].files and "--budget" in tree["send"].valued
    assert "--json" in tree["send"].options and "--json" not in tree["send"].valued
