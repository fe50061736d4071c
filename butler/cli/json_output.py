"""``--json``, the same on every command: one JSON document on stdout (what the command
found or did, or ``{"error": {"code", "message"}}`` when it could not), the exit code as
without it (docs/operations.md, "Exit codes"). Messages meant for a person stay on stderr."""

from __future__ import annotations

import argparse
import json
from typing import Any


def json_flag(p: argparse.ArgumentParser, help_text: str = "print JSON instead of text") -> None:
    p.add_argument("--json", action="store_true", help=help_text)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=_our_values))


def _our_values(value: Any) -> Any:
    # Imported only when a value needs it: ``butler token`` must not load the protocol package.
    from internal.protocol.a2a.codec.exact_json import json_default

    return json_default(value)


def error_json(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **details}}
