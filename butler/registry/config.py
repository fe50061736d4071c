"""``registry.yaml`` -> ``RegistryServiceConfig``; a bad key stops start-up naming the key."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from butler.config.node import Node, read_config_file, yaml_root
from butler.config.sections import parse_token_entry
from butler.registry.federation_config import (
    FEDERATION_KEYS,
    FederationConfig,
    parse_federation,
)
from butler.registry.store import redact_url
from internal.http import TokenEntry

DEFAULT_PORT = 8090


@dataclass(frozen=True)
class RegistryServiceConfig:
    source: str = "<defaults>"
    bind_address: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    data_dir: Path = Path("data/registry")
    # "sqlite:/absolute/path.db" or a redis:// URL, which may hold a password.
    store: str = field(default="sqlite:data/registry/registry.db", repr=False)
    tokens: tuple[TokenEntry, ...] = ()
    max_names_per_identity: int = 16
    max_card_bytes: int = 64 * 1024
    min_ttl_seconds: int = 10
    default_ttl_seconds: int = 300
    max_ttl_seconds: int = 3600
    sweep_interval_seconds: float = 30.0
    max_page_size: int = 100
    max_writes_per_minute: int = 120
    max_inflight: int = 256
    body_timeout_seconds: float = 10.0
    refusal_hold_seconds: float = 1.0  # as the daemon's server.refusal_hold_seconds
    # ARD: its identity, what it crawls, the registries it federates with.
    federation: FederationConfig = field(default_factory=FederationConfig)

    @property
    def store_display(self) -> str:
        return redact_url(self.store)


_INT_KEYS: dict[str, tuple[int, int]] = {
    "max_names_per_identity": (1, 1_000_000),
    "max_card_bytes": (1024, 16 * 1024 * 1024),
    "min_ttl_seconds": (1, 86_400),
    "default_ttl_seconds": (1, 86_400),
    "max_ttl_seconds": (1, 7 * 86_400),
    "max_page_size": (1, 1000),
    "max_writes_per_minute": (1, 1_000_000),
    "max_inflight": (1, 100_000),
}
_FLOAT_KEYS = ("sweep_interval_seconds", "body_timeout_seconds")


def load_registry_config(
    path: str | Path, env: Mapping[str, str] | None = None
) -> RegistryServiceConfig:
    file = str(path)
    text = read_config_file(path)
    return parse_registry_config(text, file=file, env=env, base_dir=Path(path).resolve().parent)


def parse_registry_config(
    text: str,
    *,
    file: str = "<registry config>",
    env: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
) -> RegistryServiceConfig:
    root = yaml_root(text, file, env)
    top = root.mapping({"registry"})
    if "registry" not in top:
        root.fail("expected a top-level 'registry' mapping")
    node = top["registry"]
    k = node.mapping({
        "bind_address", "port", "store", "data_dir", "token_hashes", "sweep_interval_seconds",
        "body_timeout_seconds", "refusal_hold_seconds", *_INT_KEYS, *FEDERATION_KEYS,
    })
    base = base_dir or Path.cwd()
    d = RegistryServiceConfig()
    data_dir = Path(k["data_dir"].string()) if "data_dir" in k else d.data_dir
    data_dir = data_dir if data_dir.is_absolute() else base / data_dir
    store = _store(k["store"], base) if "store" in k else f"sqlite:{data_dir / 'registry.db'}"
    if "token_hashes" not in k or not k["token_hashes"].value:
        node.fail("token_hashes: at least one token hash is required "
                  "(make one with 'butler token new')")
    tokens = tuple(parse_token_entry(n) for n in k["token_hashes"].items())
    limits: dict[str, Any] = {key: k[key].integer(minimum=lo, maximum=hi)
                              for key, (lo, hi) in _INT_KEYS.items() if key in k}
    limits |= {key: k[key].number(minimum=0.1) for key in _FLOAT_KEYS if key in k}
    if "refusal_hold_seconds" in k:
        limits["refusal_hold_seconds"] = k["refusal_hold_seconds"].number(minimum=0)
    config = RegistryServiceConfig(
        source=file,
        bind_address=_bind(k["bind_address"]) if "bind_address" in k else d.bind_address,
        port=k["port"].integer(minimum=0, maximum=65535) if "port" in k else d.port,
        data_dir=data_dir, store=store, tokens=tokens, **limits,
        federation=parse_federation(k, base),
    )
    if not config.min_ttl_seconds <= config.default_ttl_seconds <= config.max_ttl_seconds:
        bad = k.get("default_ttl_seconds") or k.get("max_ttl_seconds") \
            or k.get("min_ttl_seconds") or node
        bad.fail("need min_ttl_seconds <= default_ttl_seconds <= max_ttl_seconds, got "
                 f"{config.min_ttl_seconds} <= {config.default_ttl_seconds} <= "
                 f"{config.max_ttl_seconds}")
    return config


def _bind(node: Node) -> str:
    text = node.string()
    if text != "localhost":
        try:
            ipaddress.ip_address(text)
        except ValueError:
            node.fail(f"expected an IP address, got {text!r}")
    return text


def _store(node: Node, base: Path) -> str:
    text = node.string()
    if text.startswith("sqlite:"):
        path = text.removeprefix("sqlite:")
        # sqlite:///abs/path is the URL spelling of sqlite:/abs/path.
        path = path[2:] if path.startswith("///") else path
        if not path:
            node.fail("expected sqlite:PATH")
        full = Path(path) if Path(path).is_absolute() else base / path
        return f"sqlite:{full}"
    if text.startswith(("redis://", "rediss://", "unix://")):
        try:
            parts = urlsplit(text)
            _ = parts.port
        except ValueError:
            node.fail("not a valid Redis URL")
        if parts.scheme != "unix" and not parts.hostname:
            node.fail("a Redis URL needs a host, e.g. redis://127.0.0.1:6379/0")
        return text
    node.fail(f"expected sqlite:PATH or redis://HOST:PORT/DB, got {redact_url(text)!r}")
