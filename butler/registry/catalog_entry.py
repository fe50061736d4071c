"""AI Catalog entries (ARD v0.9, ``../shared/specs/ard/``): what a Butler publishes at
``/.well-known/ai-catalog.json`` and what a registry indexes, checks and serves.

One module for both sides, so the entry a Butler signs is the entry a registry verifies:

- identifiers are ``urn:air:<publisher>:<namespace...>:<name>``, ``publisher`` a domain;
- ``trustManifest.identity`` is the agent's Ed25519 key as a ``did:jwk`` and
  ``trustManifest.signature`` a detached JWS by that key over the RFC 8785 canonical entry
  without the signature itself;
- a key rotation travels as ``metadata.keyRotations``: the agent's rotation statements,
  space-separated (metadata values are scalars), each old key's signature over the next.

``check_entry`` is the one gate for an entry from outside (a crawled catalog, an
upstream registry, a gossip push): every URL a well-formed http(s) URL without
credentials, no control characters, bounded sizes. It never fetches anything.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from yarl import URL

from butler.config.common import DOMAIN
from butler.registry.model import bad, check_url, has_control
from internal.protocol.a2a.model import RequestError
from internal.signing import (
    BadSignature,
    IdentityKey,
    NotCanonical,
    PublicKey,
    b64url,
    canonical,
    public_key_from_jwk,
    sign_jws,
    unb64url,
    verify_jws,
)

SPEC_VERSION = "1.0"
A2A_CARD = "application/a2a-agent-card+json"
MCP_CARD = "application/mcp-server-card+json"
CATALOG = "application/ai-catalog+json"
REGISTRY = "application/ai-registry+json"
ENTRY_SIGNATURE_TYPE = "ai-catalog-entry+jws"
ROTATIONS_KEY = "keyRotations"

URN = re.compile(r"urn:air:([a-zA-Z0-9.-]+)((?::[a-zA-Z0-9._-]+)+)")
_SEGMENT = re.compile(r"[^a-zA-Z0-9._-]+")
_ENTRY_FIELDS = frozenset({
    "identifier", "displayName", "type", "url", "data", "description", "tags", "capabilities",
    "representativeQueries", "version", "updatedAt", "metadata", "trustManifest"})
_MANIFEST_FIELDS = frozenset({"identity", "identityType", "trustSchema", "attestations",
                              "provenance", "signature"})
MAX_TEXT = 8192
MAX_LIST = 64
MAX_DATA_BYTES = 64 * 1024


def is_domain(text: str) -> bool:
    return bool(DOMAIN.fullmatch(text))


def publisher_of_url(url: str) -> str:
    """The publisher a URL's host can be: itself when it is a domain name (or a dotted
    IPv4 address), else ``agent.localhost``, the URN guide's placeholder."""
    host = (URL(url).raw_host or "").lower()
    return host if is_domain(host) else "agent.localhost"


def urn(publisher: str, namespace: str, name: str) -> str:
    """An identifier from parts: characters a URN segment cannot hold become ``-``."""
    parts = [_SEGMENT.sub("-", p).strip("-") or "x" for p in (namespace, name)]
    return f"urn:air:{publisher.lower()}:{parts[0]}:{parts[1]}"


def publisher_of(identifier: str) -> str:
    """The ``<publisher>`` segment, lower case ("" when ``identifier`` is no ARD URN)."""
    found = URN.fullmatch(identifier)
    return found.group(1).lower() if found else ""


def serves_publisher(host: str, publisher: str) -> bool:
    """Whether a document fetched from ``host`` may speak for ``publisher``: the same
    domain or one of its subdomains (``api.acme.com`` for ``acme.com``)."""
    host, publisher = host.lower().rstrip("."), publisher.lower()
    return bool(publisher) and (host == publisher or host.endswith("." + publisher))


# --- keys and signatures -------------------------------------------------------------

def did_jwk(key: PublicKey) -> str:
    return "did:jwk:" + b64url(canonical(key.jwk))


def key_of_identity(identity: str) -> PublicKey:
    """The Ed25519 key a ``did:jwk`` identity names (``BadSignature`` for anything else)."""
    if not isinstance(identity, str) or not identity.startswith("did:jwk:"):
        raise BadSignature("trustManifest.identity is not a did:jwk key")
    try:
        jwk = json.loads(unb64url(identity.removeprefix("did:jwk:")))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BadSignature("trustManifest.identity holds no JSON key") from None
    return public_key_from_jwk(jwk)


def signed_payload(entry: Mapping[str, Any]) -> bytes:
    """What an entry's signature covers: the whole entry but the signature."""
    view = dict(entry)
    manifest = view.get("trustManifest")
    if isinstance(manifest, dict):
        view["trustManifest"] = {k: v for k, v in manifest.items() if k != "signature"}
    try:
        return canonical(view)
    except NotCanonical as exc:
        raise BadSignature(f"the entry has no canonical form: {exc.message}") from None


def sign_entry(entry: dict[str, Any], key: IdentityKey,
               rotations: tuple[str, ...] = ()) -> dict[str, Any]:
    """``entry`` with its trust manifest: the key as identity, the rotations that lead to
    it, and a detached JWS by it over the rest."""
    signed = dict(entry)
    if rotations:
        signed["metadata"] = {**signed.get("metadata", {}), ROTATIONS_KEY: " ".join(rotations)}
    signed["trustManifest"] = {"identity": did_jwk(key.public), "identityType": "did"}
    jws = sign_jws(key, signed_payload(signed), {"typ": ENTRY_SIGNATURE_TYPE})
    protected, _, signature = jws.split(".")
    signed["trustManifest"]["signature"] = f"{protected}..{signature}"
    return signed


def entry_key(entry: Mapping[str, Any]) -> PublicKey | None:
    """The key a signed entry was signed by, once its signature checks; None when the
    entry carries no signature; ``BadSignature`` when it does not check out."""
    manifest = entry.get("trustManifest")
    if not isinstance(manifest, dict) or "signature" not in manifest:
        return None
    key = key_of_identity(manifest.get("identity", ""))
    signature = manifest["signature"]
    if not isinstance(signature, str):
        raise BadSignature("trustManifest.signature is not a compact JWS")
    verify_jws(signature, key, payload=signed_payload(entry))
    return key


def entry_rotations(entry: Mapping[str, Any]) -> list[str]:
    metadata = entry.get("metadata")
    found = metadata.get(ROTATIONS_KEY) if isinstance(metadata, dict) else None
    return found.split()[:64] if isinstance(found, str) else []


# --- checking entries from outside ----------------------------------------------------

def _string(value: Any, path: str, max_len: int = MAX_TEXT, *, multiline: bool = False) -> str:
    if not isinstance(value, str):
        raise bad(path, "expected a string")
    if len(value) > max_len:
        raise bad(path, f"longer than {max_len} characters")
    if has_control(value, multiline=multiline):
        raise bad(path, "must not contain control characters")
    return value


def _strings(value: Any, path: str, max_items: int = MAX_LIST, max_len: int = 256) -> list[str]:
    if not isinstance(value, list) or len(value) > max_items:
        raise bad(path, f"expected a list of at most {max_items} strings")
    return [_string(v, f"{path}[{i}]", max_len) for i, v in enumerate(value)]


def check_entry(raw: Any, path: str = "entry") -> dict[str, Any]:
    """``raw`` as a catalog entry (``RequestError`` naming the field otherwise)."""
    if not isinstance(raw, dict):
        raise bad(path, "expected an object")
    unknown = sorted(set(raw) - _ENTRY_FIELDS)
    if unknown:
        raise bad(f"{path}.{unknown[0][:64]}", "unknown field")
    for key in ("identifier", "displayName", "type"):
        if key not in raw:
            raise bad(f"{path}.{key}", "required")
    identifier = _string(raw["identifier"], f"{path}.identifier", 512)
    if not URN.fullmatch(identifier) or not is_domain(publisher_of(identifier)):
        raise bad(f"{path}.identifier", "expected urn:air:<publisher domain>:<namespace>:<name>")
    _string(raw["displayName"], f"{path}.displayName", 200)
    _string(raw["type"], f"{path}.type", 128)
    if ("url" in raw) == ("data" in raw):
        raise bad(path, "exactly one of url and data")
    if "url" in raw:
        check_url(raw["url"], f"{path}.url")
    elif not isinstance(raw["data"], dict):
        raise bad(f"{path}.data", "expected an object")
    elif len(json.dumps(raw["data"], default=str)) > MAX_DATA_BYTES:
        raise bad(f"{path}.data", f"larger than {MAX_DATA_BYTES} bytes")
    if "description" in raw:
        _string(raw["description"], f"{path}.description", multiline=True)
    for key in ("tags", "capabilities"):
        if key in raw:
            _strings(raw[key], f"{path}.{key}")
    if "representativeQueries" in raw:
        queries = _strings(raw["representativeQueries"], f"{path}.representativeQueries", 5,
                           2000)
        if len(queries) < 2:
            raise bad(f"{path}.representativeQueries", "expected 2 to 5 queries")
    for key in ("version", "updatedAt"):
        if key in raw:
            _string(raw[key], f"{path}.{key}", 64)
    if "metadata" in raw:
        _metadata(raw["metadata"], f"{path}.metadata")
    if "trustManifest" in raw:
        _trust_manifest(raw["trustManifest"], f"{path}.trustManifest")
    return raw


def _metadata(value: Any, path: str) -> None:
    if not isinstance(value, dict) or len(value) > MAX_LIST:
        raise bad(path, f"expected an object of at most {MAX_LIST} values")
    for key, item in value.items():
        _string(key, path, 128)
        if isinstance(item, str):
            _string(item, f"{path}.{key}", 64 * 1024)
        elif not (item is None or isinstance(item, bool | int | float | Decimal)):
            raise bad(f"{path}.{key}", "expected a string, number, boolean or null")


def _trust_manifest(value: Any, path: str) -> None:
    if not isinstance(value, dict):
        raise bad(path, "expected an object")
    unknown = sorted(set(value) - _MANIFEST_FIELDS)
    if unknown:
        raise bad(f"{path}.{unknown[0][:64]}", "unknown field")
    _string(value.get("identity"), f"{path}.identity", 4096)
    if value.get("identityType", "other") not in ("spiffe", "did", "https", "other"):
        raise bad(f"{path}.identityType", "expected spiffe, did, https or other")
    if "signature" in value:
        _string(value["signature"], f"{path}.signature", 4096)
    for key, urls in (("attestations", ("uri",)), ("provenance", ())):
        items = value.get(key, [])
        if not isinstance(items, list) or len(items) > MAX_LIST:
            raise bad(f"{path}.{key}", f"expected a list of at most {MAX_LIST} objects")
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise bad(f"{path}.{key}[{i}]", "expected an object")
            for field, text in item.items():
                _string(text, f"{path}.{key}[{i}].{field}", 2048)
            for field in urls:
                check_url(item.get(field), f"{path}.{key}[{i}].{field}")
    schema = value.get("trustSchema")
    if schema is not None and not isinstance(schema, dict):
        raise bad(f"{path}.trustSchema", "expected an object")


# --- entries from a Butler card ------------------------------------------------------

def card_entry(card: Mapping[str, Any], *, publisher: str, base_url: str) -> dict[str, Any]:
    """The catalog entry of an agent from its Butler ``/v2`` card (what the card exposes
    and nothing else), pointing at the A2A card under ``base_url``; unsigned."""
    skills = [s for s in card.get("skills", []) if isinstance(s, dict)]
    name = str(card.get("agent_id") or card.get("name") or "agent")
    entry: dict[str, Any] = {
        "identifier": urn(publisher, "agent", name),
        "displayName": str(card.get("name") or name)[:200],
        "type": A2A_CARD,
        "url": base_url.rstrip("/") + "/.well-known/agent-card.json",
    }
    if card.get("description"):
        entry["description"] = str(card["description"])[:MAX_TEXT]
    top = card.get("capabilities")
    caps = dict.fromkeys(str(c) for c in (top if isinstance(top, list) else []))
    caps.update(dict.fromkeys(str(c) for s in skills for c in s.get("capabilities") or []))
    if caps:
        entry["capabilities"] = list(caps)[:MAX_LIST]
    tags = dict.fromkeys(str(t) for s in skills for t in s.get("tags") or [])
    if tags:
        entry["tags"] = list(tags)[:MAX_LIST]
    queries = list(dict.fromkeys(str(e)[:2000] for s in skills for e in s.get("examples") or []))
    if len(queries) >= 2:
        entry["representativeQueries"] = queries[:5]
    if card.get("version"):
        entry["version"] = str(card["version"])[:64]
    return entry


def mcp_entry(agent: Mapping[str, Any], *, base_url: str) -> dict[str, Any]:
    """The entry of the MCP endpoint beside an agent's own ``agent`` entry."""
    entry = {k: v for k, v in agent.items() if k not in ("url", "trustManifest", "metadata")}
    name = agent["identifier"].rsplit(":", 1)[1]
    entry["identifier"] = urn(publisher_of(agent["identifier"]), "mcp", name)
    entry["displayName"] = f"{agent['displayName']} (MCP)"[:200]
    entry["type"] = MCP_CARD
    entry["url"] = base_url.rstrip("/") + "/mcp"
    return entry


# --- a whole catalog, read by a person --------------------------------------------------

def review_catalog(document: Any, host: str) -> list[tuple[str, str, str]]:
    """Each entry of a manifest fetched from ``host``: (identifier, type, verdict), the
    verdict ``signed by <kid>``, ``unsigned``, or ``problem: ...``. ``RequestError`` when
    the document is no catalog at all."""
    if not isinstance(document, dict) or document.get("specVersion") != SPEC_VERSION:
        raise bad("specVersion", f"expected {SPEC_VERSION!r}")
    if not isinstance(document.get("entries"), list):
        raise bad("entries", "expected a list")
    unknown = sorted(set(document) - {"specVersion", "host", "entries"})
    if unknown:
        raise bad(unknown[0][:64], "unknown field")
    found = []
    for i, raw in enumerate(document["entries"]):
        shown = raw.get("identifier", f"entries[{i}]") if isinstance(raw, dict) else \
            f"entries[{i}]"
        kind = raw.get("type", "?") if isinstance(raw, dict) else "?"
        try:
            entry = check_entry(raw, f"entries[{i}]")
            publisher = publisher_of(entry["identifier"])
            if not serves_publisher(host, publisher):
                raise bad(f"entries[{i}].identifier",
                          f"publisher {publisher} is not {host}, where it was fetched")
            key = entry_key(entry)
        except RequestError as exc:
            found.append((str(shown), str(kind), f"problem: {exc.message}"))
            continue
        found.append((entry["identifier"], entry["type"],
                      f"signed by {key.kid}" if key is not None else "unsigned"))
    return found
