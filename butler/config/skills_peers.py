"""Skills and peers: what this instance runs, and whom it may delegate to."""

from __future__ import annotations

import importlib.util
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

from butler.config import model as m
from butler.config.common import BUILTIN_SKILLS, ident, secret, url
from butler.config.node import Node
from internal.protocol.a2a.codec.input_schema import schema_problem

# It goes on every card and MCP tool list, and a registry takes cards of 64 KiB by
# default (registry max_card_bytes): room for a few schemas besides the rest.
MAX_INPUT_SCHEMA_BYTES = 16 * 1024
_MEDIA_TYPE = re.compile(r"(\*|[a-z0-9][a-z0-9!#$&^_.+-]*)/(\*|[a-z0-9][a-z0-9!#$&^_.+-]*)")


def _media_types(node: Node) -> tuple[str, ...]:
    """``type/subtype`` media types (``image/*`` and ``*/*`` allowed), at least one."""
    types = node.strings()
    if not types:
        node.fail("needs at least one media type")
    for value in types:
        if not _MEDIA_TYPE.fullmatch(value.lower()):
            node.fail(f"{value!r} is not a media type like 'text/plain' or 'image/*'")
    return tuple(v.lower() for v in types)


def parse_skill(node: Node, base: Path) -> m.SkillConfig:
    k = node.mapping({
        "id", "name", "description", "capabilities", "tags", "examples", "cost_usd",
        "timeout_seconds", "expose", "tier", "builtin", "command", "python", "mcp",
        "max_output_bytes", "input_modes", "output_modes", "input_schema", "output_schema",
    })
    if "id" not in k:
        node.fail("a skill needs an id")
    skill_id = ident(k["id"])
    runners = [key for key in ("builtin", "command", "python", "mcp") if key in k]
    if len(runners) != 1:
        node.fail("a skill needs exactly one of builtin, command, python, mcp")
    builtin = k["builtin"].choice(BUILTIN_SKILLS) if "builtin" in k else None
    command = k["command"].strings() if "command" in k else None
    if command is not None and not command:
        k["command"].fail("command needs at least the program to run")
    python = k["python"].string() if "python" in k else None
    if python is not None and not re.fullmatch(r"[\w.]+:[\w.]+", python):
        k["python"].fail("expected 'package.module:function'")
    default_caps = (builtin,) if builtin and builtin != "echo" else (skill_id,)
    return m.SkillConfig(
        id=skill_id,
        name=k["name"].string(max_len=200) if "name" in k else skill_id,
        description=k["description"].string(allow_empty=True) if "description" in k else "",
        capabilities=tuple(_capability(n) for n in k["capabilities"].items())
        if "capabilities" in k else default_caps,
        tags=k["tags"].strings() if "tags" in k else (),
        examples=k["examples"].strings() if "examples" in k else (),
        cost_usd=k["cost_usd"].money() if "cost_usd" in k else Decimal("0"),
        timeout_seconds=k["timeout_seconds"].number(minimum=0.01) if "timeout_seconds" in k
        else 60.0,
        expose=k["expose"].boolean() if "expose" in k else False,
        tier=ident(k["tier"]) if "tier" in k else None,
        builtin=builtin,
        command=command,
        python=python,
        mcp=_mcp_tools(k["mcp"], base) if "mcp" in k else None,
        max_output_bytes=k["max_output_bytes"].integer(minimum=1)
        if "max_output_bytes" in k else 1024 * 1024,
        input_modes=_media_types(k["input_modes"]) if "input_modes" in k
        else ("*/*",) if builtin == "echo" else m.SkillConfig.input_modes,  # echo: anything
        output_modes=_media_types(k["output_modes"]) if "output_modes" in k
        else m.SkillConfig.output_modes,
        input_schema=_object_schema(k["input_schema"], "input") if "input_schema" in k
        else None,
        output_schema=_object_schema(k["output_schema"], "output") if "output_schema" in k
        else None,
    )


def _object_schema(node: Node, what: str) -> dict[str, Any]:
    """A JSON Schema of an object, as plain JSON (YAML dates and the like are refused).

    Every task's input for the skill is validated against its ``input_schema``; its
    answer's data part against its ``output_schema``, for MCP hosts (docs/mcp.md).
    """
    value = node.value
    if not isinstance(value, dict):
        node.fail(f"expected a JSON Schema mapping, got {type(value).__name__}")
    if value.get("type") != "object":
        node.fail(f"a skill's {what} schema must have type: object (the task's {what} is "
                  "an object)")
    if "properties" in value and not isinstance(value["properties"], dict):
        node.fail("properties must be a mapping")
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        node.fail(f"not plain JSON: {exc}")
    if len(text.encode()) > MAX_INPUT_SCHEMA_BYTES:
        node.fail(f"larger than {MAX_INPUT_SCHEMA_BYTES} bytes as JSON")
    schema: dict[str, Any] = json.loads(text)
    if (problem := schema_problem(schema)) is not None:
        node.fail(f"not a valid JSON Schema 2020-12: {problem}")
    return schema


def _mcp_tools(node: Node, base: Path) -> m.McpToolsConfig:
    k = node.mapping({"command", "tools", "url", "token_env", "token_file"})
    if ("command" in k) == ("url" in k):
        node.fail("mcp needs exactly one of command (the MCP server's argv, run over stdio) "
                  "and url (its streamable HTTP endpoint)")
    if "url" not in k and ("token_env" in k or "token_file" in k):
        node.fail("token_env and token_file are for an mcp url: a command gets no token")
    command = k["command"].strings() if "command" in k else None
    if command is not None and not command:
        k["command"].fail("command needs at least the program to run")
    # The SDK is an optional extra: only a config that uses it needs it installed.
    if importlib.util.find_spec("mcp") is None:
        node.fail("mcp skills need the MCP SDK: pip install 'butler-a2a[mcp]'")
    return m.McpToolsConfig(command=command, url=url(k["url"]) if "url" in k else None,
                            tools=k["tools"].strings() if "tools" in k else None,
                            token=secret(k, base))


def _capability(node: Node) -> str:
    text = ident(node)
    return text


def parse_peer(node: Node, base: Path) -> m.PeerConfig:
    k = node.mapping({
        "name", "url", "token_env", "token_file", "capabilities", "spend_cap_usd", "cost_usd",
        "connect_timeout_seconds", "timeout_seconds", "max_response_bytes", "ca_file",
        "protocol",
    })
    for required in ("name", "url"):
        if required not in k:
            node.fail(f"a peer needs {required}")
    token = secret(k, base)
    if not token:
        node.fail("a peer needs token_env or token_file holding its bearer token")
    d = m.PeerConfig(name="", url="")
    return m.PeerConfig(
        name=ident(k["name"]),
        url=url(k["url"]),
        token=token,
        capabilities=tuple(_capability(n) for n in k["capabilities"].items())
        if "capabilities" in k else (),
        spend_cap_usd=k["spend_cap_usd"].money() if "spend_cap_usd" in k else None,
        cost_usd=k["cost_usd"].money() if "cost_usd" in k else d.cost_usd,
        connect_timeout_seconds=k["connect_timeout_seconds"].number(minimum=0.01)
        if "connect_timeout_seconds" in k else d.connect_timeout_seconds,
        timeout_seconds=k["timeout_seconds"].number(minimum=0.01) if "timeout_seconds" in k
        else d.timeout_seconds,
        max_response_bytes=k["max_response_bytes"].integer(minimum=1024)
        if "max_response_bytes" in k else d.max_response_bytes,
        ca_file=_existing_file(k["ca_file"], base) if "ca_file" in k else None,
        protocol=k["protocol"].choice(("butler", "a2a")) if "protocol" in k else d.protocol,
    )


def _existing_file(node: Node, base: Path) -> Path:
    text = node.string()
    if "\0" in text:
        node.fail("a path cannot contain a NUL byte")
    path = Path(text)
    path = path if path.is_absolute() else base / path
    if not path.is_file():
        node.fail(f"no such file: {path}")
    return path
