"""ARD requests, checked (``../shared/specs/ard/ard.openapi.yaml``): the query model's
filters, the List API's filter expression and ``orderBy``, and page tokens.

Every refusal is a ``RequestError`` naming the field, which the ARD routes answer as
``400 INVALID_ARGUMENT``. A filter path must be one an entry can have (a standard field,
``trustManifest.*``, ``metadata.<key>``, or ``publisher`` and ``source``, which the
registry derives), so a typo is an error rather than a filter nothing passes.

Page tokens are the registry's own: an offset (or, for a listing in identifier order,
the last identifier shown) and a digest of the request it belongs to,
MACed with a key every replica derives from the same config, so a token cannot be forged,
moved to another query, or carried over from an upstream registry.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from butler.registry.model import bad, has_control

MAX_TEXT = 1000
MAX_VALUES = 32
DEFAULT_SEARCH_PAGE = 10
DEFAULT_LIST_PAGE = 20
MAX_PAGE = 100
FEDERATION_MODES = ("auto", "referrals", "none")
_TOP_PATHS = frozenset({
    "identifier", "displayName", "type", "url", "description", "tags", "capabilities",
    "representativeQueries", "version", "updatedAt", "publisher", "source"})
_NESTED_PATHS = frozenset({
    "trustManifest.identity", "trustManifest.identityType", "trustManifest.signature",
    "trustManifest.attestations.type", "trustManifest.attestations.uri",
    "trustManifest.attestations.mediaType", "trustManifest.attestations.digest",
    "trustManifest.provenance.relation", "trustManifest.provenance.sourceId",
    "trustManifest.provenance.sourceDigest", "trustManifest.trustSchema.identifier",
    "trustManifest.trustSchema.version", "trustManifest.trustSchema.governanceUri",
    "trustManifest.trustSchema.verificationMethods"})
_METADATA_KEY = re.compile(r"metadata\.[A-Za-z0-9_.:-]{1,128}")
ORDER_FIELDS = {"identifier": "identifier", "displayName": "displayName", "name": "displayName",
                "type": "type", "publisher": "publisher", "updatedAt": "updatedAt",
                "createdAt": "createdAt", "created_at": "createdAt"}

Filters = dict[str, tuple[str, ...]]


def check_path(path: Any, where: str) -> str:
    if not isinstance(path, str) or not (
            path in _TOP_PATHS or path in _NESTED_PATHS or _METADATA_KEY.fullmatch(path)):
        shown = str(path)[:80]
        raise bad(where, f"unknown field path {shown!r} (a catalog entry field, "
                  "trustManifest.*, metadata.<key>, publisher or source)")
    return path


def _value(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) > 512 or has_control(value):
        raise bad(where, "expected a string of at most 512 characters")
    return value


def parse_filters(raw: Any, where: str = "query.filter") -> Filters:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_VALUES:
        raise bad(where, f"expected an object of at most {MAX_VALUES} field paths")
    filters: Filters = {}
    for path, values in raw.items():
        check_path(path, f"{where}.{str(path)[:80]}")
        items = values if isinstance(values, list) else [values]
        if not items or len(items) > MAX_VALUES:
            raise bad(f"{where}.{path}", f"expected 1 to {MAX_VALUES} values")
        filters[path] = tuple(_value(v, f"{where}.{path}") for v in items)
    return filters


def _fields(raw: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise bad(where, "expected a JSON object")
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise bad(f"{where}.{unknown[0][:64]}" if where != "body" else unknown[0][:64],
                  f"unknown field (expected: {', '.join(sorted(allowed))})")
    return raw


def _page_size(raw: Any, default: int, where: str = "pageSize") -> int:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_PAGE:
        raise bad(where, f"expected a whole number from 1 to {MAX_PAGE}")
    return raw


def _text(raw: Any, where: str, *, required: bool) -> str:
    if raw is None and not required:
        return ""
    if not isinstance(raw, str) or not raw.strip() or len(raw) > MAX_TEXT or has_control(raw):
        raise bad(where, f"expected non-empty text of at most {MAX_TEXT} characters")
    return raw


@dataclass(frozen=True)
class SearchRequest:
    text: str
    filters: Filters
    federation: str
    page_size: int
    page_token: str | None

    def digest(self) -> str:
        return _digest(["search", self.text, self.filters, self.federation])


def parse_search(body: Any) -> SearchRequest:
    body = _fields(body, "body", {"query", "federation", "pageSize", "pageToken"})
    if "query" not in body:
        raise bad("query", "required")
    query = _fields(body["query"], "query", {"text", "filter"})
    if "text" not in query:
        raise bad("query.text", "required")
    federation = body.get("federation", "auto")
    if federation not in FEDERATION_MODES:
        raise bad("federation", f"expected one of {', '.join(FEDERATION_MODES)}")
    token = body.get("pageToken")
    if token is not None and not isinstance(token, str):
        raise bad("pageToken", "expected a string")
    return SearchRequest(_text(query["text"], "query.text", required=True),
                         parse_filters(query.get("filter")), federation,
                         _page_size(body.get("pageSize"), DEFAULT_SEARCH_PAGE), token)


@dataclass(frozen=True)
class Facet:
    field: str
    limit: int
    min_count: int


def parse_explore(body: Any) -> tuple[str, Filters, list[Facet]]:
    body = _fields(body, "body", {"query", "resultType"})
    query = _fields(body.get("query", {}), "query", {"text", "filter"})
    if "resultType" not in body:
        raise bad("resultType", "required")
    result = _fields(body["resultType"], "resultType", {"facets"})
    raw = result.get("facets")
    if not isinstance(raw, list) or not 1 <= len(raw) <= 16:
        raise bad("resultType.facets", "expected a list of 1 to 16 facets")
    facets = []
    for i, item in enumerate(raw):
        where = f"resultType.facets[{i}]"
        item = _fields(item, where, {"field", "limit", "minCount"})
        if "field" not in item:
            raise bad(f"{where}.field", "required")
        min_count = item.get("minCount", 1)
        if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 0:
            raise bad(f"{where}.minCount", "expected a whole number >= 0")
        facets.append(Facet(check_path(item["field"], f"{where}.field"),
                            _page_size(item.get("limit"), 20, f"{where}.limit"), min_count))
    return (_text(query.get("text"), "query.text", required=False),
            parse_filters(query.get("filter")), facets)


# --- GET /agents ---------------------------------------------------------------------

_CLAUSE = re.compile(
    r"\s*([A-Za-z][A-Za-z0-9_.:-]*)\s*(>=|<=|!=|=|>|<|:)\s*"
    r"(?:'([^']*)'|\"([^\"]*)\"|([^\s'\"]+))\s*")
_AND = re.compile(r"\s+AND\s+", re.IGNORECASE)


@dataclass(frozen=True)
class ListRequest:
    filters: Filters  # field paths, as search takes them
    name_contains: str
    created_after: float | None
    updated_after: float | None
    order: tuple[tuple[str, bool], ...]  # (field, descending)
    page_size: int
    page_token: str | None

    def digest(self) -> str:
        return _digest(["list", self.filters, self.name_contains, self.created_after,
                        self.updated_after, self.order])


def _instant(text: str, where: str) -> float:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise bad(where, f"expected an ISO 8601 date or time, got {text[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def parse_list(params: Mapping[str, str]) -> ListRequest:
    allowed = {"filter", "orderBy", "pageSize", "pageToken"}
    for key in params:
        if key not in allowed:
            raise bad(key[:64], f"unknown query parameter (expected: {', '.join(sorted(allowed))})")
    filters: Filters = {}
    name, created, updated = "", None, None
    expression = params.get("filter", "").strip()
    if len(expression) > 2000 or has_control(expression):
        raise bad("filter", "at most 2000 characters, without control characters")
    for clause in _AND.split(expression) if expression else []:
        found = _CLAUSE.fullmatch(clause)
        if found is None:
            raise bad("filter", f"cannot read {clause[:80]!r}: expected field = 'value' "
                      "clauses joined by AND")
        key, op, value = found.group(1), found.group(2), next(
            g for g in found.group(3, 4, 5) if g is not None)
        if key in ("createdAfter", "updatedAfter"):
            if op not in (">", "=", ">="):
                raise bad("filter", f"{key} takes > 'date'")
            instant = _instant(value, f"filter.{key}")
            if key == "createdAfter":
                created = instant
            else:
                updated = instant
            continue
        if op not in ("=", ":"):
            raise bad("filter", f"{key} takes = 'value' (comma-separated values: any of them)")
        if key == "displayName":
            name = value.casefold()
            continue
        path = "publisher" if key in ("publisherId", "publisher") else check_path(
            key, f"filter.{key}")
        values = tuple(v.strip() for v in value.split(",") if v.strip())
        if not values:
            raise bad(f"filter.{key}", "expected a value")
        filters[path] = values
    order = []
    for part in params.get("orderBy", "identifier").split(","):
        bits = part.split()
        if not bits or len(bits) > 2 or bits[0] not in ORDER_FIELDS or (
                len(bits) == 2 and bits[1].upper() not in ("ASC", "DESC")):
            raise bad("orderBy", f"expected fields from {', '.join(sorted(ORDER_FIELDS))}, "
                      "each optionally ASC or DESC")
        order.append((ORDER_FIELDS[bits[0]], len(bits) == 2 and bits[1].upper() == "DESC"))
    size = params.get("pageSize")
    if size is not None and not (size.isascii() and size.isdigit()):
        raise bad("pageSize", f"expected a whole number from 1 to {MAX_PAGE}")
    return ListRequest(filters, name, created, updated, tuple(order),
                       _page_size(int(size) if size is not None else None, DEFAULT_LIST_PAGE),
                       params.get("pageToken"))


# --- page tokens ---------------------------------------------------------------------

def _digest(parts: list[Any]) -> str:
    text = json.dumps(parts, sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class PageTokens:
    def __init__(self, secret: bytes) -> None:
        self._key = hashlib.sha256(b"butler-ard-page-token\0" + secret).digest()

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()[:16]

    def issue(self, offset: int, digest: str, after: str = "") -> str:
        fields: dict[str, Any] = {"o": offset, "q": digest}
        if after:
            fields["a"] = after
        payload = json.dumps(fields, separators=(",", ":")).encode()
        return _b64(payload) + "." + _b64(self._mac(payload))

    def offset(self, token: str | None, digest: str) -> int:
        return self.position(token, digest)[0]

    def position(self, token: str | None, digest: str) -> tuple[int, str]:
        """The offset and the last identifier (or "") a token says a page starts after."""
        if token is None or token == "":
            return 0, ""
        try:
            body, mac = token.split(".")
            payload = _unb64(body)
            ok = len(token) <= 2000 and hmac.compare_digest(self._mac(payload), _unb64(mac))
            data = json.loads(payload) if ok else None
        except (ValueError, binascii.Error, UnicodeDecodeError):
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("o"), int) or data["o"] < 0 \
                or not isinstance(data.get("a", ""), str):
            raise bad("pageToken", "not a page token this registry issued")
        if data.get("q") != digest:
            raise bad("pageToken", "issued for another query")
        return int(data["o"]), str(data.get("a", ""))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
