"""``butler completion bash|zsh``: a completion script for the shell, made from the CLI's
own argparse parsers, so it knows every command, sub-command and option there is.

The script holds the parsers' words as data (a ``case`` per command path), and one small
function per shell walks the words typed so far: no Python runs when Tab is pressed.
Options that take a file (``-c``, ``--token-file``) complete file names; an option with
``choices`` completes those.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

SHELLS = ("bash", "zsh")


def add_parsers(sub: SubParsers) -> None:
    p = sub.add_parser(
        "completion", help="print a shell completion script (bash or zsh)",
        description="Prints a completion script for SHELL. Load it for this shell with "
                    "'source <(butler completion bash)' (or zsh), or install it: "
                    "docs/operations.md, 'Shell completion'.")
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(handler=_completion)


@dataclass
class Command:
    """One command path's words: its sub-commands, options, and the options' values."""

    commands: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    valued: list[str] = field(default_factory=list)  # options followed by a value
    files: list[str] = field(default_factory=list)  # ... that is a file name
    choices: dict[str, list[str]] = field(default_factory=dict)


def walk(parser: argparse.ArgumentParser, path: str = "") -> dict[str, Command]:
    """Every command path (``""``, ``"tasks"``, ``"tasks list"``...) and its words."""
    found = {path: Command()}
    here = found[path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                here.commands.append(name)
                found.update(walk(child, f"{path} {name}".strip()))
            continue
        if not action.option_strings:
            # A positional with choices (``completion bash``) completes like a sub-command.
            here.commands += [str(c) for c in action.choices or ()]
            continue
        here.options += action.option_strings
        if action.nargs == 0:
            continue
        here.valued += action.option_strings
        if action.choices is not None:
            for option in action.option_strings:
                here.choices[option] = [str(c) for c in action.choices]
        elif action.metavar == "FILE" or action.dest in ("config", "file", "token_file"):
            here.files += action.option_strings
    return found


def _cases(function: str, rows: dict[str, list[str]]) -> str:
    lines = [f"_butler_{function}() {{", '    case "$1" in']
    for key, words in rows.items():
        if words:
            lines.append(f"        '{key}') echo '{' '.join(words)}' ;;")
    lines += ["    esac", "}"]
    return "\n".join(lines)


def data_functions(tree: dict[str, Command]) -> str:
    """Shell functions, valid in bash and zsh alike, that answer from the parsers' words."""
    choices = {f"{path}|{opt}": words for path, cmd in tree.items()
               for opt, words in cmd.choices.items()}
    return "\n".join([
        _cases("commands", {p: c.commands for p, c in tree.items()}),
        _cases("options", {p: c.options for p, c in tree.items()}),
        _cases("valued", {p: c.valued for p, c in tree.items()}),
        _cases("files", {p: c.files for p, c in tree.items()}),
        _cases("choices", choices),
    ])


# The words typed before the cursor, minus options and their values, name the command path.
_WALK = """\
    local cmd="" word skip=0 i
    for ((i = {first}; i < {cursor}; i++)); do
        word=${{{words}[i]}}
        if ((skip)); then skip=0; continue; fi
        if [[ $word == -* ]]; then
            [[ " $(_butler_valued "$cmd") " == *" $word "* ]] && skip=1
            continue
        fi
        [[ " $(_butler_commands "$cmd") " == *" $word "* ]] && cmd="${{cmd:+$cmd }}$word"
    done"""

BASH = """\
_butler() {{
{walk}
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} words
    if [[ " $(_butler_files "$cmd") " == *" $prev "* ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
        return
    fi
    if [[ " $(_butler_valued "$cmd") " == *" $prev "* ]]; then
        COMPREPLY=($(compgen -W "$(_butler_choices "$cmd|$prev")" -- "$cur"))
        return
    fi
    words=$(_butler_commands "$cmd")
    [[ $cur == -* ]] && words=$(_butler_options "$cmd")
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _butler butler
"""

ZSH = """\
#compdef butler
_butler() {{
{walk}
    local cur=${{words[CURRENT]}} prev=${{words[CURRENT-1]}}
    if [[ " $(_butler_files "$cmd") " == *" $prev "* ]]; then
        _files
        return
    fi
    if [[ " $(_butler_valued "$cmd") " == *" $prev "* ]]; then
        compadd -- ${{=$(_butler_choices "$cmd|$prev")}}
        return
    fi
    if [[ $cur == -* ]]; then
        compadd -- ${{=$(_butler_options "$cmd")}}
    else
        compadd -- ${{=$(_butler_commands "$cmd")}}
    fi
}}
if [[ ${{zsh_eval_context[-1]}} == loadautofunc ]]; then
    _butler "$@"
else
    compdef _butler butler
fi
"""


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    head = f"# butler completion for {shell}, made by `butler completion {shell}`\n"
    data = data_functions(walk(parser))
    if shell == "bash":
        walker = _WALK.format(first=1, cursor="COMP_CWORD", words="COMP_WORDS")
        return head + data + "\n" + BASH.format(walk=walker)
    walker = _WALK.format(first=2, cursor="CURRENT", words="words")
    body = ZSH.format(walk=walker)
    first, _, rest = body.partition("\n")  # "#compdef" must stay the file's first line
    return first + "\n" + head + data + "\n" + rest


def _completion(args: argparse.Namespace) -> int:
    from butler.cli import build_parser  # every command's parsers: all modules loaded

    sys.stdout.write(script(args.shell, build_parser()))
    return 0
