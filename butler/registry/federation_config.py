"""The registry's ARD settings in ``registry.yaml``: who it is, what it crawls, and the
registries it federates with (docs/registry.md, "Federation")."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from butler.config.common import domain, secret, url
from butler.config.node import Node
from butler.registry.catalog_entry import REGISTRY, publisher_of_url, urn

TRUST_LEVELS = ("trusted", "listed", "referral")
FEDERATION_KEYS = ("public_url", "publisher", "name", "catalogs", "crawl", "upstreams",
                   "federation")


@dataclass(frozen=True)
class Upstream:
    name: str
    url: str  # its ARD API's base: {url}/search, {url}/v1/gossip
    trust: str  # trusted: merged; listed: merged and marked; referral: only referred
    token: str = field(default="", repr=False)
    display_name: str = ""

    @property
    def identifier(self) -> str:
        return urn(publisher_of_url(self.url), "registry", self.name)

    def referral(self) -> dict[str, str]:
        return {"identifier": self.identifier, "displayName": self.display_name or self.name,
                "type": REGISTRY, "url": self.url + "/search"}


@dataclass(frozen=True)
class FederationConfig:
    public_url: str = ""  # what results name as their source; "": http://bind:port
    publisher: str = ""  # the domain of its own identifier; "": public_url's host
    name: str = "registry"
    catalogs: tuple[str, ...] = ()
    crawl_registered: bool = True  # crawl the catalog of every agent that registers
    crawl_interval_seconds: float = 3600.0
    crawl_timeout_seconds: float = 10.0
    max_catalog_bytes: int = 1024 * 1024
    max_catalog_entries: int = 10_000
    max_catalog_depth: int = 3
    crawl_loopback: bool = False
    crawl_private: bool = False
    upstreams: tuple[Upstream, ...] = ()
    deadline_seconds: float = 2.0
    max_hops: int = 3
    gossip_interval_seconds: float = 60.0
    gossip_ttl_seconds: int = 300


def parse_federation(k: dict[str, Node], base: Path) -> FederationConfig:
    """The ``RegistryServiceConfig`` fields from the ARD keys of ``registry:``."""
    d = FederationConfig()
    values: dict[str, object] = {}
    if "public_url" in k:
        values["public_url"] = url(k["public_url"])
    if "publisher" in k:
        values["publisher"] = domain(k["publisher"])
    if "name" in k:
        values["name"] = k["name"].string(max_len=64)
    if "catalogs" in k:
        values["catalogs"] = tuple(url(n) for n in k["catalogs"].items())
    if "crawl" in k:
        c = k["crawl"].mapping({"registered_agents", "interval_seconds", "timeout_seconds",
                                "max_bytes", "max_entries", "max_depth", "allow_loopback",
                                "allow_private"})
        for key, name in (("registered_agents", "crawl_registered"),
                          ("allow_loopback", "crawl_loopback"),
                          ("allow_private", "crawl_private")):
            if key in c:
                values[name] = c[key].boolean()
        for key, name in (("interval_seconds", "crawl_interval_seconds"),
                          ("timeout_seconds", "crawl_timeout_seconds")):
            if key in c:
                values[name] = c[key].number(minimum=0.1)
        for key, name, hi in (("max_bytes", "max_catalog_bytes", 64 * 1024 * 1024),
                              ("max_entries", "max_catalog_entries", 1_000_000),
                              ("max_depth", "max_catalog_depth", 8)):
            if key in c:
                values[name] = c[key].integer(minimum=0 if key == "max_depth" else 1,
                                              maximum=hi)
    if "upstreams" in k:
        ups = tuple(_upstream(n, base) for n in k["upstreams"].items())
        names = [u.name for u in ups]
        if len(set(names)) != len(names):
            k["upstreams"].fail("upstream names must be unique")
        values["upstreams"] = ups
    if "federation" in k:
        f = k["federation"].mapping({"deadline_seconds", "max_hops", "gossip_interval_seconds",
                                     "gossip_ttl_seconds"})
        if "deadline_seconds" in f:
            values["deadline_seconds"] = f["deadline_seconds"].number(minimum=0.05)
        if "max_hops" in f:
            values["max_hops"] = f["max_hops"].integer(minimum=0, maximum=8)
        if "gossip_interval_seconds" in f:
            values["gossip_interval_seconds"] = f["gossip_interval_seconds"].number(minimum=0.1)
        if "gossip_ttl_seconds" in f:
            values["gossip_ttl_seconds"] = f["gossip_ttl_seconds"].integer(minimum=1,
                                                                           maximum=86_400)
    return replace(d, **values)  # type: ignore[arg-type]  # keys and types checked above


def _upstream(node: Node, base: Path) -> Upstream:
    k = node.mapping({"name", "url", "trust", "display_name", "token_env", "token_file"})
    for key in ("name", "url", "trust"):
        if key not in k:
            node.fail(f"an upstream needs {key}")
    trust = k["trust"].choice(TRUST_LEVELS)
    token = secret(k, base)
    if trust != "referral" and not token:
        node.fail("a trusted or listed upstream needs token_env or token_file: "
                  "this registry calls it")
    return Upstream(name=k["name"].string(max_len=64), url=url(k["url"]), trust=trust,
                    token=token,
                    display_name=k["display_name"].string(max_len=200)
                    if "display_name" in k else "")
