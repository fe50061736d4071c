"""Value checks shared by every section of the config."""

from __future__ import annotations

import re
from pathlib import Path

from butler.config.node import Node

ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
BUILTIN_SKILLS = ("echo", "memory.write", "memory.read", "memory.search", "planner")


def ident(node: Node) -> str:
    text = node.string(max_len=128)
    if not ID.fullmatch(text):
        node.fail("must be letters, digits and . _ : - (starting with a letter or digit)")
    return text


# A domain name in lower case (a publisher in catalog URNs: urn:air:<domain>:...).
DOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
                    r"(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")


def domain(node: Node) -> str:
    text = node.string(max_len=253).lower()
    if not DOMAIN.fullmatch(text):
        node.fail(f"expected a domain name such as example.com, got {text!r}")
    return text


def url(node: Node) -> str:
    text = node.string()
    if not re.fullmatch(r"https?://[^\s/@]+(:\d+)?(/\S*)?", text):
        node.fail(f"expected an http:// or https:// URL without credentials, got {text!r}")
    return text.rstrip("/")


# What a token is when the config was loaded without its secrets (``load_config``).
UNREAD_SECRET = "(not read)"  # noqa: S105 -- a placeholder that no server accepts, not a token


def secret(k: dict[str, Node], base: Path, prefix: str = "token") -> str:
    """A bearer token from ``<prefix>_env`` (a variable's name) or ``<prefix>_file``."""
    env_key, file_key = f"{prefix}_env", f"{prefix}_file"
    source = k.get(env_key) or k.get(file_key)
    if source is not None and not source.secrets:
        return UNREAD_SECRET
    if env_key in k:
        var = k[env_key].string()
        if var not in k[env_key].env:
            k[env_key].fail(f"environment variable {var} is not set")
        k[env_key].secret_vars.add(var)
        return k[env_key].env[var].strip()
    if file_key in k:
        tpath = Path(k[file_key].string())
        tpath = tpath if tpath.is_absolute() else base / tpath
        try:
            return tpath.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            k[file_key].fail(f"cannot read token file: {exc}")
    return ""
