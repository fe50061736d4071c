"""Property tests for the config parser: whatever the file holds, loading it gives a
Config or one ConfigError naming the file and the key, never another exception."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from butler.config import Config, ConfigError, parse_config

ENV = {"TOKEN": "peer-token", "EMPTY": "", "NUM": "12"}
TREE: dict[str, Any] = {
    "agent": {"id": None, "name": None, "description": None, "url": None, "version": None},
    "data_dir": None,
    "configurations": {
        "a2a": {"enabled": None, "port": None, "bind_address": None, "token_hashes": [
            {"sha256": None, "name": None, "tier": None}], "tls": {"cert_file": None,
                                                                   "key_file": None}},
        "swarm": {"enabled": None, "max_depth": None, "budget_usd": None,
                  "workspace_ttl_hours": None, "max_children_per_task": None},
        "registry": {"self_register": None, "url": None, "token_env": None,
                     "token_file": None, "health_ttl_minutes": None},
        "mcp_server": {"allowed_capabilities": [None]},
    },
    "server": {"max_body_bytes": None, "max_json_depth": None, "body_timeout_seconds": None},
    "skills": [{"id": None, "builtin": None, "command": [None], "python": None,
                "cost_usd": None, "timeout_seconds": None, "expose": None, "tier": None,
                "capabilities": [None], "input_schema": {"type": None, "properties": None}}],
    "peers": [{"name": None, "url": None, "token_env": None, "token_file": None,
               "cost_usd": None, "spend_cap_usd": None, "timeout_seconds": None}],
    "tasks": {"retention_hours": None, "max_page_size": None},
    "telemetry": {"exporter": None}, "logging": {"level": None, "format": None},
    "rate_limits": {"per_caller_per_second": None, "max_inflight_tasks_per_caller": None},
    "metrics": {"enabled": None, "listen": None},
}
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 70000), st.integers(-(10**300), 10**300),
    st.floats(), st.text(max_size=20),
    st.sampled_from(["echo", "memory.read", "127.0.0.1", "::1", "http://x:1", "https://a/b",
                     "${TOKEN}", "${MISSING}", "${NUM}", "0.50", "-1", "1e400", "a" * 64,
                     "0" * 64, "tests.plugins.sample:about", "TOKEN", "nan",
                     "/dev/null", "/nonexistent/file", "admin"]))
junk = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


def shaped(tree: Any) -> st.SearchStrategy[Any]:
    """Mostly the documented keys, with any values; sometimes junk in their place."""
    if isinstance(tree, dict):
        parts = {k: shaped(v) for k, v in tree.items()}
        return st.fixed_dictionaries({}, optional=parts) | junk
    if isinstance(tree, list):
        return st.lists(shaped(tree[0]), max_size=3) | junk
    return scalars


def parses_or_config_error(text: str, base: Path) -> None:
    try:
        config = parse_config(text, file="fuzz.yaml", env=ENV, base_dir=base)
    except ConfigError as err:
        assert str(err).startswith("fuzz.yaml: ")
    else:
        assert isinstance(config, Config)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(shaped(TREE))
def test_any_structure_loads_or_is_one_config_error(data: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        parses_or_config_error(yaml.safe_dump(data), Path(tmp))


@given(st.text(max_size=300) | st.sampled_from(
    ["a: " * 500 + "b", "!!python/object:os.system x", "a: &x [*x]",
     "? [a]\n: b", "a: 2001-12-14", "a: !!binary aGk=", "\t- x", "\ufeffagent: {}"]))
def test_any_text_loads_or_is_one_config_error(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        parses_or_config_error(text, Path(tmp))


@pytest.mark.parametrize("text", [
    "[" * 2000, "agent: {id: " + "1" * 5000 + "}", "tasks: {retention_hours: " + "9" * 400 + "}",
    'peers: [{name: p, url: "http://x:1", token_file: "a\\0b"}]',
    'configurations: {a2a: {tls: {cert_file: "a\\0b", key_file: k}}}',
], ids=["deep", "long-int", "huge-number", "nul-token-file", "nul-cert-file"])
def test_known_crashes_are_config_errors(text: str, tmp_path: Path) -> None:
    parses_or_config_error(text, tmp_path)
