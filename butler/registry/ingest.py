"""Web ingestion: AI Catalog manifests fetched into the index (ARD v0.9 section 6.2).

Every fetch goes through the one outbound guard (``internal.http``) under the crawl's own
rules (``crawl.allow_loopback`` / ``crawl.allow_private``: public addresses only unless
the operator opens more), never follows a redirect, stops at ``crawl.max_bytes`` and at
JSON nested past 32 levels, and asks again with ``If-None-Match`` so an unchanged catalog
costs a 304. A catalog is due again after ``crawl.interval_seconds`` or its
``Cache-Control: max-age``, whichever is longer.

Nested catalogs (entries of type ``application/ai-catalog+json``, inline or by URL) are
followed to ``crawl.max_depth``, each URL once per crawl (a catalog that lists itself
ends there), and at most ``crawl.max_entries`` entries are read in all. An entry whose
URN names another publisher than the host it was fetched from (or a parent domain of
it) is refused; one whose signature fails, or whose key changed without a rotation
statement, is quarantined (``CatalogIndex.admit``), each with its reason.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from yarl import URL

from butler.registry.catalog_entry import (
    CATALOG,
    SPEC_VERSION,
    check_entry,
    publisher_of,
    serves_publisher,
)
from butler.registry.catalog_index import CatalogIndex
from butler.registry.federation_config import FederationConfig
from internal.http import OutboundGuard, OutboundRules, outbound_session, read_capped
from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.model import ButlerError, Unavailable

log = logging.getLogger("butler.registry")

MAX_JSON_DEPTH = 32
RETRY_SECONDS = 300.0
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*(\d{1,9})", re.IGNORECASE)


@dataclass
class CrawlReport:
    url: str
    status: str = "ok"  # ok, not_modified, failed
    admitted: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # reasons, each naming its entry
    fetched: int = 0
    reason: str = ""


@dataclass
class _Known:
    etag: str = ""
    due: float = 0.0


class CrawlFailed(Unavailable):
    """A catalog that could not be fetched or read: recorded with its URL, re-crawled at
    the next round."""

    def __init__(self, message: str) -> None:
        super().__init__("catalog_unavailable", message)


def crawl_rules(config: FederationConfig) -> OutboundRules:
    return OutboundRules(allow_loopback=config.crawl_loopback,
                         allow_private=config.crawl_private,
                         loopback_key="registry.crawl.allow_loopback",
                         private_key="registry.crawl.allow_private")


class Crawler:
    def __init__(self, config: FederationConfig, index: CatalogIndex, source: str,
                 guard: OutboundGuard | None = None) -> None:
        self.config = config
        self.index = index
        self.source = source  # this registry's URL: what crawled entries name as source
        self.guard = guard or OutboundGuard(crawl_rules(config))
        self._session: aiohttp.ClientSession | None = None
        self._known: dict[str, _Known] = {}
        self.reports: dict[str, CrawlReport] = {}  # the last crawl of each root URL

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def due(self, origin: str, url: str, now: float) -> bool:
        return self._known.get(f"{origin} {url}", _Known()).due <= now

    async def crawl(self, url: str, *, origin: str, expires_at: float, now: float,
                    belongs: str | None = None) -> CrawlReport:
        """Fetch ``url`` (and the catalogs it nests) into ``origin``, replacing what the
        origin held. ``belongs``: only entries whose URL is this agent's own."""
        report = CrawlReport(url)
        visited: set[str] = set()
        entries: list[dict[str, Any]] = []
        try:
            document = await self._fetch(url, known_as=f"{origin} {url}", now=now)
            if document is None:
                report.status = "not_modified"
                self.index.extend_origin(origin, expires_at)
                self.reports[url] = report
                return report
            visited.add(url)
            await self._manifest(document, url, 0, visited, entries, report)
        except CrawlFailed as exc:
            report.status, report.reason = "failed", str(exc)
            log.info("crawl of %s failed: %s", url, exc)
            # Tried again after a while, not at every round; a new registration retries now.
            known = self._known.setdefault(f"{origin} {url}", _Known())
            known.due = now + min(self.config.crawl_interval_seconds, RETRY_SECONDS)
            self.reports[url] = report
            return report
        report.fetched = len(visited)
        for entry in entries:
            if belongs is not None and not _belongs(entry, belongs):
                continue
            why = self.index.admit(entry, origin=origin, source=self.source, trust="local",
                                   expires_at=expires_at, now=now)
            if why is None:
                report.admitted.append(entry["identifier"])
            else:
                report.refused.append(why)
        self.index.replace_origin(origin, report.admitted)
        if report.refused:
            log.info("crawl of %s: %d entries refused, e.g. %s", url, len(report.refused),
                     report.refused[0])
        self.reports[url] = report
        return report

    async def _manifest(self, document: Any, url: str, depth: int, visited: set[str],
                        entries: list[dict[str, Any]], report: CrawlReport) -> None:
        if not isinstance(document, dict) or document.get("specVersion") != SPEC_VERSION \
                or not isinstance(document.get("entries"), list):
            raise CrawlFailed(f"{url}: not an AI catalog (specVersion 1.0 and entries)")
        host = URL(url).raw_host or ""
        for i, raw in enumerate(document["entries"]):
            if len(entries) + len(report.refused) >= self.config.max_catalog_entries:
                report.refused.append(f"{url}: more than {self.config.max_catalog_entries} "
                                      "entries; the rest were not read")
                return
            try:
                entry = check_entry(raw, f"entries[{i}]")
            except ButlerError as exc:
                report.refused.append(f"{url}: {exc.message}")
                continue
            publisher = publisher_of(entry["identifier"])
            if not serves_publisher(host, publisher):
                report.refused.append(f"{entry['identifier']}: publisher {publisher} does "
                                      f"not match {host}, where the catalog was fetched")
                continue
            entries.append(entry)
            if entry["type"] == CATALOG:
                await self._nested(entry, url, depth, visited, entries, report)

    async def _nested(self, entry: dict[str, Any], url: str, depth: int, visited: set[str],
                      entries: list[dict[str, Any]], report: CrawlReport) -> None:
        if depth + 1 > self.config.max_catalog_depth:
            report.refused.append(f"{entry['identifier']}: nested past the depth limit "
                                  f"({self.config.max_catalog_depth}); not followed")
            return
        if "data" in entry:
            await self._manifest(entry["data"], url, depth + 1, visited, entries, report)
            return
        target = str(entry["url"])
        if target in visited:
            return  # a cycle, or a catalog listed twice: read once
        visited.add(target)
        try:
            document = await self._fetch(target, known_as=None, now=0.0)
            await self._manifest(document, target, depth + 1, visited, entries, report)
        except CrawlFailed as exc:
            report.refused.append(f"{entry['identifier']}: nested catalog: {exc}")

    async def _fetch(self, url: str, *, known_as: str | None, now: float) -> Any:
        """The parsed document, or None when it has not changed (304). ``known_as``: the
        key its ETag and due time are kept under (a nested catalog's are not kept)."""
        if self._session is None:
            self._session = outbound_session(self.guard, limit=32)
        known = self._known.get(known_as) if known_as is not None else None
        headers = {"Accept": "application/json"}
        if known is not None and known.etag:
            headers["If-None-Match"] = known.etag
        timeout = aiohttp.ClientTimeout(total=self.config.crawl_timeout_seconds)
        try:
            async with self._session.get(url, headers=headers, timeout=timeout,
                                         allow_redirects=False) as resp:
                if resp.status == 304 and known is not None:
                    known.due = now + self._interval(resp.headers.get("Cache-Control"))
                    return None
                if resp.status != 200:
                    raise CrawlFailed(f"{url} answered HTTP {resp.status}")
                raw = await read_capped(resp.content.iter_chunked(64 * 1024),
                                        self.config.max_catalog_bytes,
                                        announced=resp.content_length)
                etag = resp.headers.get("ETag", "")
                cache = resp.headers.get("Cache-Control")
        except ButlerError as exc:  # the guard's refusal, or over the size cap
            raise CrawlFailed(f"{url}: {exc.message}") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise CrawlFailed(f"{url}: {exc or type(exc).__name__}") from None
        try:
            document = exact_json.loads(raw, max_depth=MAX_JSON_DEPTH)
        except ButlerError as exc:
            raise CrawlFailed(f"{url}: {exc.message}") from None
        if known_as is not None:
            self._known[known_as] = _Known(etag[:256], now + self._interval(cache))
            if len(self._known) > 100_000:
                del self._known[next(iter(self._known))]
        return document

    def _interval(self, cache_control: str | None) -> float:
        found = _MAX_AGE.search(cache_control or "")
        max_age = float(found.group(1)) if found else 0.0
        return max(self.config.crawl_interval_seconds, max_age)


def _belongs(entry: dict[str, Any], agent_url: str) -> bool:
    """An entry of the agent at ``agent_url`` (its card, its MCP endpoint), not of an
    agent the same daemon hosts under its own path (which registers by itself)."""
    target = str(entry.get("url", ""))
    base = agent_url.rstrip("/")
    rest = target[len(base):] if target.startswith(base) else None
    return rest is not None and (rest in ("", "/", "/mcp") or rest.startswith("/.well-known/"))


async def crawl_all(crawler: Crawler, jobs: list[tuple[str, str, float, str | None]],
                    now: float, parallel: int = 8) -> list[CrawlReport]:
    """Several crawls, ``parallel`` at a time: (url, origin, expires_at, belongs)."""
    gate = asyncio.Semaphore(parallel)

    async def one(url: str, origin: str, expires_at: float, belongs: str | None) -> CrawlReport:
        async with gate:
            return await crawler.crawl(url, origin=origin, expires_at=expires_at, now=now,
                                       belongs=belongs)

    return list(await asyncio.gather(*(one(*job) for job in jobs)))
