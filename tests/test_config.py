"""Configuration: the documented keys as written, ${ENV} substitution, secure defaults,
and one-line errors with exit code 2 from the real CLI."""

from __future__ import annotations

import asyncio
import logging
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from butler.config import ConfigError, load_config, parse_config
from tests.support import REPO, Swarm, child_env, new_pair

# The block from the product's documentation, keys exactly as written there.
DOCUMENTED = """\
configurations:
  a2a:
    enabled: true
    port: 8081
    bind_address: 127.0.0.1
    token_hashes:
      - "{bare}"
      - {{sha256: "{mapped}", name: office, tier: admin}}
  swarm:
    enabled: true
    max_depth: 4
    budget_usd: 5.0
    workspace_ttl_hours: 24
  registry:
    self_register: true
    health_ttl_minutes: 5
    trusted_publishers: [Acme.com.]
  mcp_server:
    allowed_capabilities: [memory.read, data.read]
"""


def test_documented_keys_are_accepted_as_written(tmp_path: Path) -> None:
    _, bare = new_pair()
    _, mapped = new_pair()
    path = tmp_path / "butler.yaml"
    path.write_text(DOCUMENTED.format(bare=bare, mapped=mapped))
    cfg = load_config(path)
    assert (cfg.a2a.enabled, cfg.a2a.port, cfg.a2a.bind_address) == (True, 8081, "127.0.0.1")
    first, second = cfg.a2a.tokens
    assert first.digest.hex() == bare
    assert not first.identity.bound and first.identity.tier == "default"
    assert second.digest.hex() == mapped
    assert (second.identity.name, second.identity.tier, second.identity.bound) == (
        "office", "admin", True)
    assert cfg.swarm.enabled and cfg.swarm.max_depth == 4
    assert cfg.swarm.budget_usd == Decimal("5.0")  # exact, not a binary float
    assert cfg.swarm.workspace_ttl_hours == 24
    assert cfg.registry.self_register and cfg.registry.health_ttl_minutes == 5
    assert cfg.registry.trusted_publishers == ("acme.com",)
    assert cfg.mcp_server.allowed_capabilities == ("memory.read", "data.read")


def test_secure_defaults() -> None:
    cfg = parse_config("")
    assert cfg.a2a.enabled is False
    assert (cfg.a2a.bind_address, cfg.a2a.port) == ("127.0.0.1", 8081)
    assert cfg.a2a.tokens == ()
    assert cfg.mcp_server.allowed_capabilities is None
    assert cfg.limits.max_body_bytes == 1024 * 1024


def test_env_substitution(tmp_path: Path) -> None:
    _, digest = new_pair()
    path = tmp_path / "env.yaml"
    path.write_text(
        "agent: {id: '${AGENT}-1'}\n"
        "configurations:\n"
        "  a2a: {enabled: '${ON}', port: '${PORT}', bind_address: '${BIND}',"
        " token_hashes: ['${HASH}']}\n"
        "  swarm: {budget_usd: '${BUDGET}', workspace_ttl_hours: '${TTL}'}\n"
    )
    env = {"AGENT": "home", "ON": "true", "PORT": "9090", "BIND": "127.0.0.1",
           "HASH": digest, "BUDGET": "0.10", "TTL": "1.5"}
    cfg = load_config(path, env=env)
    assert cfg.agent.id == "home-1"
    assert cfg.a2a.enabled is True and cfg.a2a.port == 9090
    assert cfg.a2a.tokens[0].digest.hex() == digest
    assert cfg.swarm.budget_usd == Decimal("0.10")
    assert cfg.swarm.workspace_ttl_hours == 1.5


HASH = "ab" * 32

# (YAML, key path in the message, part of the problem)
INVALID = [
    ("configurations: {a2a: {enabld: true}}", "configurations.a2a.enabld", "unknown key"),
    ("nonsense: 1", "nonsense", "unknown key"),
    ("configurations: {swarm: {max_depth: four}}", "configurations.swarm.max_depth",
     "expected an integer"),
    ("configurations: {a2a: {enabled: 'yes'}}", "configurations.a2a.enabled",
     "expected true or false"),
    ("configurations: {a2a: {token_hashes: [abc123]}}", "configurations.a2a.token_hashes[0]",
     "SHA-256"),
    (f"configurations: {{a2a: {{token_hashes: ['{HASH.upper()}']}}}}",
     "configurations.a2a.token_hashes[0]", "lowercase hex"),
    ("configurations: {a2a: {token_hashes: [{name: office}]}}",
     "configurations.a2a.token_hashes[0]", "needs sha256"),
    (f"configurations: {{a2a: {{token_hashes: ['{HASH}', {{sha256: '{HASH}', name: x}}]}}}}",
     "configurations.a2a.token_hashes", "duplicate token hash"),
    (f"configurations: {{a2a: {{token_hashes: '{HASH}'}}}}",
     "configurations.a2a.token_hashes", "expected a list"),
    ("configurations: {a2a: {port: 70000}}", "configurations.a2a.port", "<= 65535"),
    ("configurations: {a2a: {port: -1}}", "configurations.a2a.port", ">= 0"),
    ("configurations: {a2a: {port: http}}", "configurations.a2a.port", "expected an integer"),
    ("configurations: {a2a: {bind_address: my-laptop}}", "configurations.a2a.bind_address",
     "expected an IP address"),
    ("configurations: {a2a: {port: '${BUTLER_TEST_UNSET_PORT}'}}", "configurations.a2a.port",
     "BUTLER_TEST_UNSET_PORT is not set"),
    ("configurations: {swarm: {budget_usd: -1}}", "configurations.swarm.budget_usd", ">= 0"),
    ("configurations: {swarm: {routing_threshold: 1.5}}",
     "configurations.swarm.routing_threshold", "between 0 and 1"),
    ("configurations: {swarm: {routing_threshold: -0.1}}",
     "configurations.swarm.routing_threshold", ">= 0"),
    ("configurations: {registry: {health_ttl_minutes: .nan}}",
     "configurations.registry.health_ttl_minutes", "finite"),
    ("configurations: {registry: {trusted_publishers: ['http://acme.com']}}",
     "configurations.registry.trusted_publishers[0]", "expected a domain name"),
    ("server: {max_body_bytes: 0}", "server.max_body_bytes", ">= 1"),
    ("server: {keepalive_timeout_seconds: 5}", "server.keepalive_timeout_seconds",
     "unknown key"),
    ("skills: [{builtin: echo}]", "skills[0]", "needs an id"),
    ("skills: [{id: e, builtin: echo, input_schema: [a]}]", "skills[0].input_schema",
     "expected a JSON Schema mapping"),
    ("skills: [{id: e, builtin: echo, input_schema: {type: string}}]",
     "skills[0].input_schema", "must have type: object"),
    ("skills: [{id: e, builtin: echo, input_schema: {type: object, properties: [a]}}]",
     "skills[0].input_schema", "properties must be a mapping"),
    ("skills: [{id: e, builtin: echo, input_schema: {type: object, default: 2024-01-01}}]",
     "skills[0].input_schema", "not plain JSON"),
    ("skills: [{id: e, builtin: echo, input_schema: {type: object, description: "
     + "x" * 17000 + "}}]", "skills[0].input_schema", "larger than 16384 bytes"),
    ("- just\n- a list", "<root>", "expected a mapping"),
    ("configurations: {a2a: [}", "<root>", "invalid YAML at line 1"),
]


@pytest.mark.parametrize(("text", "key", "problem"), INVALID, ids=[c[1] for c in INVALID])
def test_invalid_config_names_the_key(text: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, file="bad.yaml", env={})
    message = str(info.value)
    assert message.startswith(f"bad.yaml: {key}: "), message
    assert problem in message
    assert "\n" not in message


def test_input_schema_is_kept_as_plain_json() -> None:
    cfg = parse_config("skills: [{id: e, builtin: echo, input_schema: {type: object, "
                       "properties: {n: {type: integer, maximum: 3}}, required: [n]}}]",
                       file="ok.yaml", env={})
    assert cfg.skills[0].input_schema == {
        "type": "object", "properties": {"n": {"type": "integer", "maximum": 3}},
        "required": ["n"]}


async def _butler(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "butler", *args, cwd=REPO, env=child_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(20):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


# A sample of INVALID through the real CLI: unknown key, wrong type, bad hash, bad port,
# unset variable.
CLI_CASES = [INVALID[i] for i in (0, 2, 4, 9, 13)]


async def test_cli_rejects_bad_config_with_one_line_and_exit_2(tmp_path: Path) -> None:
    runs = []
    for i, (text, key, problem) in enumerate(CLI_CASES):
        path = tmp_path / f"bad{i}.yaml"
        path.write_text(text)
        for args in (("check-config", str(path)), ("serve", "-c", str(path))):
            runs.append((args, str(path), key, problem))
    results = await asyncio.gather(*(_butler(*args) for args, *_ in runs))
    for (args, where, key, problem), (code, out, err) in zip(runs, results, strict=True):
        assert code == 2, (args, err)
        assert out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert where in lines[0] and f" {key}: " in lines[0] and problem in lines[0], lines[0]


async def test_check_config_accepts_the_example_and_serve_refuses_a2a_off(
    tmp_path: Path,
) -> None:
    off = tmp_path / "off.yaml"
    off.write_text("agent: {id: home}\n")
    (ok_code, ok_out, _), (off_code, _, off_err) = await asyncio.gather(
        _butler("check-config", str(REPO / "config.example.yaml")),
        _butler("serve", "-c", str(off)),
    )
    assert ok_code == 0 and ": ok" in ok_out
    assert off_code == 2
    assert str(off) in off_err and "configurations.a2a.enabled" in off_err
    assert len(off_err.strip().splitlines()) == 1


async def test_non_loopback_bind_warns_to_use_tls(
    swarm: Swarm, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="butler.daemon")
    await swarm.start("local")
    assert not [r for r in caplog.records if "TLS" in r.getMessage()]
    await swarm.start("lan", configurations={"a2a": {"bind_address": "0.0.0.0"}})
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("TLS" in r.getMessage() and "reverse proxy" in r.getMessage()
               for r in warnings), [r.getMessage() for r in warnings]


async def test_check_config_imports_plugins_and_flags_reserved_ids(tmp_path: Path) -> None:
    _, digest = new_pair()
    path = tmp_path / "skills.yaml"
    base = f"configurations:\n  a2a: {{enabled: true, token_hashes: ['{digest}']}}\nskills:\n"
    path.write_text(base + "  - {id: p, python: 'nosuch.module:fn'}\n")
    code, _, err = await _butler("check-config", str(path))
    assert code == 2
    assert "skills[0].python: cannot import nosuch.module" in err

    path.write_text(base + "  - {id: admin.reset, builtin: echo, expose: true}\n")
    code, out, err = await _butler("check-config", str(path))
    assert code == 0 and ": ok" in out
    assert "skills[0].id: 'admin.reset' is in a reserved namespace" in err
