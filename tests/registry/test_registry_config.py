from __future__ import annotations

from pathlib import Path

import pytest

from butler.config.node import ConfigError
from butler.registry.config import RegistryServiceConfig, parse_registry_config
from internal.http import hash_token

HASH = hash_token("t")


def parse(body: str, **env: str) -> RegistryServiceConfig:
    return parse_registry_config(body, file="r.yaml", env=env, base_dir=Path("/etc/butler"))


def test_defaults() -> None:
    cfg = parse(f"registry:\n  token_hashes: [{HASH}]\n")
    assert (cfg.bind_address, cfg.port) == ("127.0.0.1", 8090)
    assert cfg.store == "sqlite:/etc/butler/data/registry/registry.db"
    assert cfg.max_names_per_identity == 16 and cfg.max_card_bytes == 64 * 1024
    assert (cfg.min_ttl_seconds, cfg.default_ttl_seconds, cfg.max_ttl_seconds) == (10, 300, 3600)
    assert cfg.sweep_interval_seconds == 30 and cfg.max_page_size == 100
    assert cfg.max_writes_per_minute == 120
    assert cfg.tokens[0].identity.name == f"token:{HASH[:8]}"


def test_every_key() -> None:
    cfg = parse(f"""
registry:
  bind_address: 0.0.0.0
  port: 9000
  store: redis://:${{PW}}@redis.lan:6380/2
  token_hashes: [{{sha256: {HASH}, name: ops, tier: admin}}]
  max_names_per_identity: 4
  max_card_bytes: 2048
  min_ttl_seconds: 5
  default_ttl_seconds: 60
  max_ttl_seconds: 120
  sweep_interval_seconds: 2.5
  max_page_size: 20
  max_writes_per_minute: 30
  max_inflight: 10
  body_timeout_seconds: 3
""", PW="s3cret")
    assert cfg.store == "redis://:s3cret@redis.lan:6380/2"
    assert cfg.store_display == "redis://***@redis.lan:6380/2"
    assert "s3cret" not in repr(cfg)
    assert cfg.tokens[0].identity.is_admin and cfg.tokens[0].identity.name == "ops"
    assert (cfg.bind_address, cfg.port, cfg.max_page_size) == ("0.0.0.0", 9000, 20)
    assert cfg.sweep_interval_seconds == 2.5


@pytest.mark.parametrize(("store", "expected"), [
    ("sqlite:reg.db", "sqlite:/etc/butler/reg.db"),
    ("sqlite:/var/lib/reg.db", "sqlite:/var/lib/reg.db"),
    ("sqlite:///var/lib/reg.db", "sqlite:/var/lib/reg.db"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
])
def test_store_urls(store: str, expected: str) -> None:
    assert parse(f"registry:\n  token_hashes: [{HASH}]\n  store: {store}\n").store == expected


@pytest.mark.parametrize(("extra", "message"), [
    ("  nope: 1\n", "r.yaml: registry.nope: unknown key"),
    ("  port: x\n", "r.yaml: registry.port: expected an integer"),
    ("  bind_address: example.com\n", "r.yaml: registry.bind_address: expected an IP"),
    ("  store: redis://\n", "r.yaml: registry.store: a Redis URL needs a host"),
    ("  store: 'sqlite:'\n", "r.yaml: registry.store: expected sqlite:PATH"),
    ("  store: postgres://u:pw@h/db\n", "r.yaml: registry.store: expected sqlite:PATH"),
    ("  default_ttl_seconds: 5000\n", "r.yaml: registry.default_ttl_seconds: need min_ttl"),
    ("  sweep_interval_seconds: 0\n", "r.yaml: registry.sweep_interval_seconds: must be >="),
    ("  max_page_size: 0\n", "r.yaml: registry.max_page_size: must be >= 1"),
])
def test_errors_name_the_key(extra: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(f"registry:\n  token_hashes: [{HASH}]\n{extra}")
    assert str(info.value).startswith(message)
    assert "pw" not in str(info.value)


@pytest.mark.parametrize("body", ["", "registry:\n  port: 1\n", "registry:\n  token_hashes: []\n"])
def test_token_hashes_are_required(body: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(body)
    assert "token_hashes" in str(info.value) or "registry" in str(info.value)


def test_other_top_level_keys_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"r\.yaml: configurations: unknown key"):
        parse(f"registry:\n  token_hashes: [{HASH}]\nconfigurations: {{}}\n")


def test_federation_keys() -> None:
    cfg = parse(f"""
registry:
  token_hashes: [{HASH}]
  public_url: https://registry.example.com
  publisher: Example.com
  name: main
  catalogs: [https://acme.com/.well-known/ai-catalog.json]
  crawl:
    registered_agents: false
    interval_seconds: 600
    timeout_seconds: 5
    max_bytes: 100000
    max_entries: 500
    max_depth: 2
    allow_loopback: true
    allow_private: true
  upstreams:
    - {{name: b, url: https://b.example.com, trust: trusted, token_env: B_TOKEN}}
    - {{name: pub, url: https://finder.example.org, trust: referral, display_name: Public}}
  federation:
    deadline_seconds: 1.5
    max_hops: 2
    gossip_interval_seconds: 20
    gossip_ttl_seconds: 120
""", B_TOKEN="tok-b")
    fed = cfg.federation
    assert (fed.public_url, fed.publisher, fed.name) == (
        "https://registry.example.com", "example.com", "main")
    assert fed.catalogs == ("https://acme.com/.well-known/ai-catalog.json",)
    assert not fed.crawl_registered and fed.crawl_loopback and fed.crawl_private
    assert (fed.max_catalog_bytes, fed.max_catalog_entries, fed.max_catalog_depth) == (
        100000, 500, 2)
    b, pub = fed.upstreams
    assert (b.trust, b.token, pub.trust, pub.token) == ("trusted", "tok-b", "referral", "")
    assert "tok-b" not in repr(cfg)
    assert pub.referral() == {"identifier": "urn:air:finder.example.org:registry:pub",
                              "displayName": "Public", "type": "application/ai-registry+json",
                              "url": "https://finder.example.org/search"}
    assert (fed.deadline_seconds, fed.max_hops, fed.gossip_ttl_seconds) == (1.5, 2, 120)


@pytest.mark.parametrize(("body", "problem"), [
    ("  upstreams: [{name: b, url: https://b.x, trust: best}]", "expected one of trusted"),
    ("  upstreams: [{name: b, url: https://b.x, trust: listed}]", "needs token_env"),
    ("  upstreams: [{url: https://b.x, trust: referral}]", "needs name"),
    ("  publisher: not a domain", "expected a domain name"),
    ("  catalogs: [ftp://x]", "expected an http:// or https:// URL"),
    ("  crawl: {max_depth: 99}", "must be <= 8"),
    ("  federation: {hops: 3}", "unknown key"),
])
def test_bad_federation_keys_name_the_key(body: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse(f"registry:\n  token_hashes: [{HASH}]\n{body}\n")
