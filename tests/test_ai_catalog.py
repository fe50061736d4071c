"""GET /.well-known/ai-catalog.json on a real daemon: valid against ARD's JSON Schema,
one signed entry per exposed agent (and its MCP endpoint), nothing its card hides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
import yaml

from butler.config.loader import load_config
from butler.config.node import ConfigError
from butler.registry.catalog_entry import (
    A2A_CARD,
    MCP_CARD,
    check_entry,
    entry_key,
    key_of_identity,
    publisher_of,
)
from internal.signing import BadSignature
from tests.hosting_support import hosted_entry
from tests.support import Instance, Swarm, config_dict, run_cli, write_config

SCHEMA = json.loads((Path(__file__).parent / "fixtures" / "ai-catalog.schema.json").read_text())

SKILLS = [
    {"id": "weather", "builtin": "echo", "capabilities": ["weather.forecast"], "expose": True,
     "name": "Weather", "description": "Forecasts for a city", "tags": ["weather"],
     "examples": ["forecast for Paris tomorrow", "will it rain in Oslo", "wind in Chicago"]},
    {"id": "secret", "builtin": "echo", "capabilities": ["secret.cap"], "expose": False,
     "examples": ["never listed", "not this either"]},
]


async def catalog(http: aiohttp.ClientSession, inst: Instance,
                  headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    async with http.get(f"{inst.url}/.well-known/ai-catalog.json", headers=headers) as resp:
        body = await resp.read()
        return resp.status, json.loads(body) if body else {}, resp.headers.get("ETag", "")


def validate(doc: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(
        SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(doc)


async def test_catalog_is_public_valid_signed_and_cacheable(
        swarm: Swarm, http: aiohttp.ClientSession) -> None:
    entry, _ = hosted_entry("helper")
    home = await swarm.start("home", skills=SKILLS, extra={"agents": [entry]},
                             configurations={"mcp_server": {}})
    status, doc, etag = await catalog(http, home)  # no token
    assert status == 200
    validate(doc)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for item in doc["entries"]:
        by_type.setdefault(item["type"], []).append(item)
        check_entry(item)
        assert publisher_of(item["identifier"]) == "127.0.0.1"  # the host it is served at
        assert entry_key(item) == key_of_identity(item["trustManifest"]["identity"])
    agents = {e["identifier"]: e for e in by_type[A2A_CARD]}
    assert set(agents) == {"urn:air:127.0.0.1:agent:home", "urn:air:127.0.0.1:agent:helper"}
    own = agents["urn:air:127.0.0.1:agent:home"]
    assert own["url"] == f"{home.url}/.well-known/agent-card.json"
    assert own["capabilities"] == ["weather.forecast"]  # not the unexposed skill's
    assert own["tags"] == ["weather"]
    assert own["representativeQueries"] == SKILLS[0]["examples"]
    assert "never listed" not in json.dumps(doc)
    assert entry_key(own) == home.daemon.identity.key.public
    helper = agents["urn:air:127.0.0.1:agent:helper"]
    assert helper["url"] == f"{home.url}/helper/.well-known/agent-card.json"
    assert home.daemon.agents is not None
    hosted_key = home.daemon.agents.running["helper"].daemon.identity.key.public
    assert entry_key(helper) == hosted_key
    assert [e["url"] for e in by_type[MCP_CARD]] == [f"{home.url}/mcp"]
    assert doc["host"] == {"displayName": "home butler"}  # no did:web for an address

    status, _, again = await catalog(http, home, {"If-None-Match": etag})
    assert (status, again) == (304, etag)


async def test_a_configured_publisher_names_the_entries(
        swarm: Swarm, http: aiohttp.ClientSession) -> None:
    home = await swarm.start("home", skills=SKILLS,
                             extra={"agent": {"id": "home", "name": "Home",
                                              "publisher": "Example.COM"}})
    _, doc, _ = await catalog(http, home)
    validate(doc)
    assert [e["identifier"] for e in doc["entries"]] == [
        "urn:air:example.com:agent:home", "urn:air:example.com:mcp:home"]
    assert doc["host"] == {"displayName": "Home", "identifier": "did:web:example.com"}


async def test_a_changed_entry_no_longer_verifies(
        swarm: Swarm, http: aiohttp.ClientSession) -> None:
    home = await swarm.start("home", skills=SKILLS)
    _, doc, _ = await catalog(http, home)
    forged = dict(doc["entries"][0], url="https://evil.example/card.json")
    with pytest.raises(BadSignature):
        entry_key(forged)


async def test_butler_catalog_prints_and_checks_a_catalog(
        swarm: Swarm, http: aiohttp.ClientSession) -> None:
    home = await swarm.start("home", skills=SKILLS)
    code, out, err = await run_cli("catalog", home.url)
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split() == ["IDENTIFIER", "TYPE", "CHECK"]
    assert rows[0].startswith("urn:air:127.0.0.1:agent:home")
    assert f"signed by {home.daemon.identity.kid}" in rows[0]
    # -c: the daemon's own, at agent.url (its config listens on port 0: any port)
    cfg = yaml.safe_load(home.config_path.read_text())
    cfg["agent"]["url"] = home.url
    home.config_path.with_name("own.yaml").write_text(yaml.safe_dump(cfg))
    code, out, _ = await run_cli("catalog", "-c", str(home.config_path.with_name("own.yaml")),
                                 "--json")
    assert code == 0 and json.loads(out)["specVersion"] == "1.0"


async def test_butler_catalog_names_each_problem(tmp_path: Path) -> None:
    from internal.signing import IdentityKey
    from tests.registry.catalog_support import Site, entry, manifest

    key = IdentityKey.generate()
    async with Site().running() as site:
        tampered = {**entry("127.0.0.1", "ok", key=key), "description": "edited"}
        site.pages["/.well-known/ai-catalog.json"] = manifest(
            entry("127.0.0.1", "plain"), tampered, entry("google.com", "taxes"))
        code, out, err = await run_cli("catalog", site.url)
        assert code == 1
        verdicts = {line.split()[0]: line for line in out.splitlines()[1:]}
        assert verdicts["urn:air:127.0.0.1:agent:plain"].endswith("unsigned")
        assert "signature does not match" in verdicts["urn:air:127.0.0.1:agent:ok"]
        assert "publisher google.com is not 127.0.0.1" in verdicts[
            "urn:air:google.com:agent:taxes"]
        assert "3 entries, 2 with problems" in err
        site.pages["/.well-known/ai-catalog.json"] = b"[" * 50 + b"]" * 50
        code, _, err = await run_cli("catalog", site.url + "/.well-known/ai-catalog.json")
        assert code == 1 and "nest" in err


def test_a_publisher_that_is_no_domain_stops_start_up(tmp_path: Path) -> None:
    cfg, _ = config_dict(tmp_path, "home", extra={"agent": {"id": "home",
                                                            "publisher": "not a domain"}})
    with pytest.raises(ConfigError, match=r"agent\.publisher: expected a domain name"):
        load_config(write_config(tmp_path, "home", cfg))
