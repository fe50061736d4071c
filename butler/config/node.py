"""A path-aware view of parsed YAML, so every validation error names its key."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, NoReturn

import yaml

from internal.protocol.a2a.model import SetupError

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ConfigError(SetupError):
    """One line naming the file, the key path and what is wrong."""

    def __init__(self, file: str, path: str, problem: str) -> None:
        super().__init__("invalid_config", f"{file}: {path or '<root>'}: {problem}")
        self.file = file
        self.path = path
        self.problem = problem


class Node:
    def __init__(
        self, file: str, path: str, value: Any, env: Mapping[str, str] | None = None,
        secrets: bool = True, secret_vars: set[str] | None = None,
    ) -> None:
        self.file = file
        self.path = path
        self.value = value
        self.env = os.environ if env is None else env
        # False for commands that read only the data folder: tokens are not looked up.
        self.secrets = secrets
        # The environment variables tokens were read from, shared by the whole document:
        # child processes (command skills, MCP servers) are started without them.
        self.secret_vars: set[str] = set() if secret_vars is None else secret_vars

    def fail(self, problem: str) -> NoReturn:
        raise ConfigError(self.file, self.path, problem)

    def _sub(self, key: str | int, value: Any) -> Node:
        path = f"{self.path}[{key}]" if isinstance(key, int) else (
            f"{self.path}.{key}" if self.path else key
        )
        return Node(self.file, path, value, self.env, self.secrets, self.secret_vars)

    @property
    def missing(self) -> bool:
        return self.value is None

    def mapping(self, allowed: set[str]) -> dict[str, Node]:
        if self.value is None:
            return {}
        if not isinstance(self.value, dict):
            self.fail(f"expected a mapping, got {_kind(self.value)}")
        out: dict[str, Node] = {}
        for key, value in self.value.items():
            if not isinstance(key, str):
                self.fail(f"keys must be strings, got {key!r}")
            if key not in allowed:
                hint = ", ".join(sorted(allowed))
                self._sub(key, value).fail(f"unknown key (expected one of: {hint})")
            out[key] = self._sub(key, value)
        return out

    def items(self) -> Iterator[Node]:
        if self.value is None:
            return iter(())
        if not isinstance(self.value, list):
            self.fail(f"expected a list, got {_kind(self.value)}")
        return (self._sub(i, v) for i, v in enumerate(self.value))

    def string(self, *, allow_empty: bool = False, max_len: int = 4096) -> str:
        value = self.value
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            self.fail(f"expected a string, got {_kind(value)}")
        text = self._expand(str(value))
        if not text and not allow_empty:
            self.fail("must not be empty")
        if len(text) > max_len:
            self.fail(f"longer than {max_len} characters")
        return text

    def _expand(self, text: str) -> str:
        def repl(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in self.env:
                self.fail(f"environment variable {name} is not set")
            return self.env[name]

        return _ENV_REF.sub(repl, text)

    def integer(self, *, minimum: int | None = None, maximum: int | None = None) -> int:
        value = self.value
        if isinstance(value, str):
            value = self._expand(value)
            try:
                value = int(value)
            except ValueError:
                self.fail(f"expected an integer, got {self.value!r}")
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"expected an integer, got {_kind(value)}")
        if minimum is not None and value < minimum:
            self.fail(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            self.fail(f"must be <= {maximum}, got {value}")
        return value

    def number(self, *, minimum: float | None = None) -> float:
        value = self.value
        if isinstance(value, str) and _ENV_REF.search(value):
            try:
                value = float(self._expand(value))
            except ValueError:
                self.fail(f"expected a number, got {self._expand(value)!r}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(f"expected a number, got {_kind(value)}")
        try:
            finite = math.isfinite(value)
        except OverflowError:
            finite = False
        if not finite:
            self.fail(f"expected a finite number, got {str(value)[:40]}")
        if minimum is not None and value < minimum:
            self.fail(f"must be >= {minimum}, got {value}")
        return float(value)

    def money(self) -> Decimal:
        """A USD amount. YAML floats are read back through their shortest text form."""
        value = self.value
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            self.fail(f"expected a USD amount, got {_kind(value)}")
        try:
            amount = Decimal(self._expand(value) if isinstance(value, str) else repr(value))
        except InvalidOperation:
            self.fail(f"expected a USD amount, got {value!r}")
        if not amount.is_finite() or amount < 0:
            self.fail(f"must be a finite amount >= 0, got {value!r}")
        return amount

    def boolean(self) -> bool:
        value = self.value
        if isinstance(value, str) and _ENV_REF.search(value):
            text = self._expand(value).strip().lower()
            if text not in ("true", "false"):
                self.fail(f"expected true or false, got {text!r}")
            return text == "true"
        if not isinstance(value, bool):
            self.fail(f"expected true or false, got {_kind(value)}")
        return value

    def choice(self, options: tuple[str, ...]) -> str:
        text = self.string()
        if text not in options:
            self.fail(f"expected one of {', '.join(options)}, got {text!r}")
        return text

    def strings(self) -> tuple[str, ...]:
        return tuple(item.string() for item in self.items())


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {
        dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
        int: "an integer", float: "a number",
    }.get(type(value), type(value).__name__)


def read_config_file(path: str | Path) -> str:
    """A config file's text, or a ``ConfigError`` naming the file."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), "", "not UTF-8 text") from None


def yaml_root(text: str, file: str, env: Mapping[str, str] | None,
              secrets: bool = True) -> Node:
    """The parsed document as a ``Node``; YAML syntax errors name the line."""
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(file, "", "invalid YAML: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer longer than Python will convert
        raise ConfigError(file, "", f"invalid YAML: {str(exc)[:120]}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "?"
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(file, "", f"invalid YAML at {where}: {problem}") from None
    return Node(file, "", data if data is not None else {}, env, secrets)
