"""The environment a skill's child process starts with (a command skill, an MCP server):
the daemon's own, without the variables the config read tokens from (``token_env``), so
a token goes only where the config sends it."""

from __future__ import annotations

import os
from collections.abc import Collection


def child_environment(secret_vars: Collection[str], **extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in secret_vars}
    env.update(extra)
    return env
