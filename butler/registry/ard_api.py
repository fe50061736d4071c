"""ARD's REST API beside the registry's own ``/v1`` (``../shared/specs/ard/``):

    POST /search        ranked entries for a text (and filters), federated by request
    POST /explore       facets over the matched set (this registry's own index)
    GET  /agents        a deterministic listing: filter expression, orderBy, paging
    POST /v1/gossip     a trusted registry's signed entries (federation.py)
    GET  /v1/catalog/status   quarantined entries and the last crawls, with reasons

Errors on the ARD routes take ARD's shape, ``{"errorCode", "message"}``
(``INVALID_ARGUMENT`` for any bad request, an unknown filter path included). The index
is fed from the same store ``/v1`` writes: a registered agent's card becomes an entry at
once and its crawled catalog replaces it (``on_registered``), so the agents ``/v1``
lists are the agents ARD finds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from yarl import URL

from butler.registry.ard_query import (
    Facet,
    ListRequest,
    PageTokens,
    parse_explore,
    parse_list,
    parse_search,
)
from butler.registry.catalog_entry import (
    CATALOG,
    card_entry,
    check_entry,
    publisher_of_url,
    urn,
)
from butler.registry.catalog_index import (
    TRUST_RANK,
    CatalogIndex,
    Indexed,
    entry_weights,
    matches_filters,
    query_tokens,
    score,
)
from butler.registry.clock import Clock
from butler.registry.config import RegistryServiceConfig
from butler.registry.federation import Candidate, Federation, hop_from
from butler.registry.ingest import Crawler, CrawlReport, crawl_all
from butler.registry.model import AgentEntry, bad
from butler.registry.store import Query, RegistryStore
from internal.http import error_headers, identity_of, json_response, read_json
from internal.protocol.a2a.model import AuthError, ButlerError

log = logging.getLogger("butler.registry")

ARD_PATHS = frozenset({"/search", "/explore", "/agents"})
CATALOG_FILE = "/.well-known/ai-catalog.json"
RESYNC_SECONDS = 300.0
_ERROR_CODES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                404: "NOT_FOUND", 429: "RATE_LIMIT_EXCEEDED", 503: "UNAVAILABLE"}


def ard_error_code(status: int) -> str:
    """ARD's code for an HTTP status (its Appendix B; 503 is ours)."""
    return _ERROR_CODES.get(status, "INVALID_ARGUMENT" if status < 500 else "INTERNAL_ERROR")


@dataclass
class Ard:
    config: RegistryServiceConfig
    store: RegistryStore
    clock: Clock
    source: str  # this registry's URL, as results name it
    identifier: str  # its URN, which other registries see in ARD-Via
    index: CatalogIndex
    crawler: Crawler
    federation: Federation
    pages: PageTokens
    pending: set[asyncio.Task[Any]] = field(default_factory=set)
    crawled: asyncio.Event = field(default_factory=asyncio.Event)  # a first round is done
    resynced: float = float("-inf")  # when the index last read the store's agents
    gossip_batches: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, config: RegistryServiceConfig, store: RegistryStore, clock: Clock) -> Ard:
        fed = config.federation
        source = fed.public_url or f"http://{config.bind_address}:{config.port}"
        publisher = fed.publisher or publisher_of_url(source)
        identifier = urn(publisher, "registry", fed.name)
        index = CatalogIndex()
        # Replicas sharing a config share the key: a page token works on any of them.
        secret = hashlib.sha256(b"".join(sorted(t.digest for t in config.tokens))).digest()
        return cls(config, store, clock, source, identifier, index,
                   Crawler(fed, index, source), Federation(fed, index, identifier),
                   PageTokens(secret))

    def bound(self, host: str, port: int) -> None:
        """Without ``public_url``, results name the address it listens on."""
        if not self.config.federation.public_url:
            self.source = self.crawler.source = f"http://{host}:{port}"

    # --- the index, fed from /v1 ------------------------------------------------------

    def on_registered(self, agent: AgentEntry) -> None:
        """Its card's entry now; its catalog's entries once crawled."""
        now = self.clock.now()
        entry = card_entry({**agent.card, "agent_id": agent.name},
                           publisher=publisher_of_url(agent.url),
                           base_url=agent.url)
        entry["metadata"] = {"registryName": agent.name, "registrant": agent.owner}
        origin = f"agent:{agent.name}"
        if not self.index.origin_of(origin):
            self.index.admit(entry, origin=origin, source=self.source, trust="local",
                             expires_at=agent.expires_at, now=now)
        else:
            self.index.extend_origin(origin, agent.expires_at)
        if self.config.federation.crawl_registered:
            self._spawn(self.crawler.crawl(catalog_url(agent.url), origin=origin,
                                           expires_at=agent.expires_at, now=now,
                                           belongs=agent.url))
        self.federation.changed.set()

    def on_heartbeat(self, agent: AgentEntry) -> None:
        self.index.extend_origin(f"agent:{agent.name}", agent.expires_at)

    def on_deleted(self, name: str) -> None:
        self.index.drop_origin(f"agent:{name}")
        self.federation.changed.set()

    def _spawn(self, job: Any) -> None:
        task = asyncio.ensure_future(job)
        self.pending.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self.pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("crawl failed: %s", task.exception())
        self.federation.changed.set()

    async def settled(self) -> None:
        """Every crawl started so far has ended (tests, and a clean shutdown)."""
        while self.pending:
            await asyncio.gather(*self.pending, return_exceptions=True)

    async def crawl_due(self) -> list[CrawlReport]:
        """One round: configured catalogs and registered agents' catalogs that are due."""
        fed, now = self.config.federation, self.clock.now()
        jobs: list[tuple[str, str, float, str | None]] = [
            (url, f"catalog:{url}", now + 3 * fed.crawl_interval_seconds, None)
            for url in fed.catalogs if self.crawler.due(f"catalog:{url}", url, now)]
        if now >= self.resynced + min(fed.crawl_interval_seconds, RESYNC_SECONDS):
            # The store's agents: registered or refreshed through another replica, or
            # before a restart (this replica's own writes reach the index at once).
            self.resynced = now
            after: str | None = None
            while True:
                agents, after = await self.store.query(Query(), now=now, limit=500, after=after)
                for agent in agents:
                    origin = f"agent:{agent.name}"
                    if not self.index.origin_of(origin):
                        self.on_registered(agent)
                        continue
                    self.index.extend_origin(origin, agent.expires_at)
                    if fed.crawl_registered and self.crawler.due(origin, catalog_url(agent.url),
                                                                 now):
                        jobs.append((catalog_url(agent.url), origin, agent.expires_at,
                                     agent.url))
                if after is None:
                    break
        reports = await crawl_all(self.crawler, jobs, now)
        self.index.expire(now)
        return reports

    async def close(self) -> None:
        for task in list(self.pending):
            task.cancel()
        await asyncio.gather(*self.pending, return_exceptions=True)
        await self.crawler.close()
        await self.federation.close()


def catalog_url(agent_url: str) -> str:
    return str(URL(agent_url).origin()) + CATALOG_FILE


ARD = web.AppKey("ard", Ard)


def ard_routes() -> list[web.RouteDef]:
    return [web.post("/search", search), web.post("/explore", explore),
            web.get("/agents", list_agents), web.post("/v1/gossip", gossip),
            web.get("/v1/catalog/status", status)]


async def ard_background(app: web.Application) -> AsyncIterator[None]:
    """The crawl and gossip loops, for the app's lifetime."""
    ard = app[ARD]
    tasks = [asyncio.create_task(_crawl_forever(ard), name="registry-crawl"),
             asyncio.create_task(ard.federation.push_forever(), name="registry-gossip")]
    yield
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await ard.close()


async def _crawl_forever(ard: Ard) -> None:
    tick = min(30.0, ard.config.federation.crawl_interval_seconds)
    while True:
        try:
            await ard.crawl_due()
        except Exception as exc:  # the next round tries again
            log.warning("registry crawl round failed: %s", exc)
        ard.crawled.set()
        await asyncio.sleep(tick)


def render_ard_error(request: web.Request, err: ButlerError) -> web.Response | None:
    """ARD's error shape on ARD's routes; None elsewhere (``/v1`` keeps its own)."""
    if request.path not in ARD_PATHS:
        return None
    status = err.status
    return json_response({"errorCode": ard_error_code(status), "message": err.message},
                         status=status,
                         headers=error_headers(err))


async def _body(request: web.Request, ard: Ard) -> Any:
    return await read_json(request, max_depth=32,
                           body_seconds=ard.config.body_timeout_seconds)


def _result(candidate: Candidate, relevance: int) -> dict[str, Any]:
    return {**candidate.entry, "score": relevance, "source": candidate.source,
            "sourceTrust": candidate.trust}


def _local(items: Iterable[Indexed]) -> list[Candidate]:
    return [Candidate(i.entry, i.source, i.trust, i.key) for i in items]


async def search(request: web.Request) -> web.Response:
    ard = request.app[ARD]
    req = parse_search(await _body(request, ard))
    offset = ard.pages.offset(req.page_token, req.digest())
    tokens = query_tokens(req.text)
    want = offset + req.page_size
    now = ard.clock.now()
    local = ard.index.ranked(tokens, req.filters, now, want + 1)
    answers = await ard.federation.ask_upstreams(req, want, hop_from(request.headers,
                                                                    ard.config.federation)) \
        if req.federation == "auto" else []
    if answers:  # merged, then all scored here: an upstream's scores are its claims
        merged = [c for c in ard.federation.merge(_local(i for _, i in local), answers)
                  if matches_filters(c.entry, c.source, req.filters)]
        ranked = heapq.nsmallest(want + 1, (
            (s, c) for c in merged if (s := score(entry_weights(c.entry), tokens)) > 0),
            key=lambda sc: (-sc[0], TRUST_RANK[sc[1].trust], sc[1].entry["identifier"]))
    else:
        ranked = [(s, c) for (s, _), c in zip(local, _local(i for _, i in local), strict=True)]
    page = ranked[offset:want]
    answer: dict[str, Any] = {"results": [_result(c, s) for s, c in page]}
    if req.federation == "referrals":
        answer["referrals"] = ard.federation.referrals()
    if len(ranked) > want:
        answer["pageToken"] = ard.pages.issue(want, req.digest())
    return json_response(answer)


async def explore(request: web.Request) -> web.Response:
    ard = request.app[ARD]
    text, filters, facets = parse_explore(await _body(request, ard))
    tokens = query_tokens(text) if text else ()
    matched = [i for i in ard.index.matching(filters, ard.clock.now(), tokens)
               if not tokens or score(i.weights, tokens) > 0]
    return json_response({"resultType": "facets",
                          "facets": {f.field: _facet(matched, f) for f in facets}})


def _facet(matched: list[Indexed], facet: Facet) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    for item in matched:
        counts.update(set(item.values(facet.field)))
    buckets = sorted(((v, n) for v, n in counts.items() if n >= facet.min_count),
                     key=lambda vn: (-vn[1], vn[0]))
    result: dict[str, Any] = {"buckets": [{"value": v, "count": n}
                                          for v, n in buckets[:facet.limit]]}
    if len(buckets) > facet.limit:
        result["otherCount"] = sum(n for _, n in buckets[facet.limit:])
    return result


async def list_agents(request: web.Request) -> web.Response:
    ard = request.app[ARD]
    req = parse_list(request.query)
    offset, after = ard.pages.position(req.page_token, req.digest())
    if req.order == (("identifier", False),) and not (
            req.name_contains or req.created_after or req.updated_after):
        found = ard.index.page(req.filters, after, req.page_size + 1, ard.clock.now())
        if found is not None:  # read from the sorted identifiers: only the page
            page, total = found[0][:req.page_size], found[1]
            answer: dict[str, Any] = {"items": [i.entry for i in page], "total": total}
            if len(found[0]) > req.page_size:
                answer["pageToken"] = ard.pages.issue(offset + len(page), req.digest(),
                                                      page[-1].identifier)
            return json_response(answer)
    items = [i for i in ard.index.matching(req.filters, ard.clock.now()) if _listed(i, req)]
    end = offset + req.page_size
    directions = {descending for _, descending in req.order}
    if len(directions) == 1:  # one direction: only the first ``end`` are put in order
        def key(i: Indexed) -> tuple[Any, ...]:
            return (*(_order_value(i, name) for name, _ in req.order), i.identifier)

        pick = heapq.nlargest if directions == {True} else heapq.nsmallest
        page = pick(end, items, key=key)[offset:]
    else:
        items.sort(key=lambda i: i.identifier)
        for name, descending in reversed(req.order):
            items.sort(key=lambda i, n=name: _order_value(i, n),  # type: ignore[misc]
                       reverse=descending)
        page = items[offset:end]
    answer = {"items": [i.entry for i in page], "total": len(items)}
    if end < len(items):
        answer["pageToken"] = ard.pages.issue(end, req.digest())
    return json_response(answer)


def _listed(item: Indexed, req: ListRequest) -> bool:
    if req.name_contains and req.name_contains not in str(item.entry["displayName"]).casefold():
        return False
    if req.created_after is not None and item.indexed_at <= req.created_after:
        return False
    if req.updated_after is not None:
        updated = _instant(item.entry.get("updatedAt"))
        return updated is not None and updated > req.updated_after
    return True


def _instant(text: Any) -> float | None:
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _order_value(item: Indexed, name: str) -> Any:
    if name == "createdAt":
        return item.indexed_at
    if name == "publisher":
        return item.publisher
    return str(item.entry.get(name, "")).casefold()


async def gossip(request: web.Request) -> web.Response:
    """Signed entries pushed by a registry this one trusts (federation.py)."""
    ard = request.app[ARD]
    name = identity_of(request).name
    upstream = next((u for u in ard.config.federation.upstreams
                     if u.trust == "trusted" and u.name == name), None)
    if upstream is None:
        raise AuthError("forbidden", f"identity {name!r} is not a trusted upstream registry "
                        "of this one (registry.upstreams, trust: trusted)")
    body = await _body(request, ard)
    if not isinstance(body, dict) or not isinstance(body.get("entries"), list) \
            or len(body["entries"]) > 500:
        raise bad("entries", "expected a list of at most 500 entries")
    ttl = body.get("ttlSeconds", ard.config.federation.gossip_ttl_seconds)
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1:
        raise bad("ttlSeconds", "expected a whole number of seconds")
    ttl = min(ttl, ard.config.max_ttl_seconds)
    origin, now = f"gossip:{upstream.name}", ard.clock.now()
    batch = ard.gossip_batches.setdefault(origin, set())
    if body.get("batch", 0) == 0:
        batch.clear()
    refused = []
    for i, raw in enumerate(body["entries"]):
        try:
            entry = check_entry(raw, f"entries[{i}]")
        except ButlerError as exc:
            refused.append(exc.message)
            continue
        manifest = entry.get("trustManifest")
        if entry["type"] == CATALOG or not isinstance(manifest, dict) \
                or "signature" not in manifest:
            refused.append(f"{entry['identifier']}: gossip carries only signed entries")
            continue
        why = ard.index.admit(entry, origin=origin, source=upstream.url, trust="trusted",
                              expires_at=now + ttl, now=now)
        # Refused or not, it was pushed: a copy verified before stays until it lapses.
        batch.add(entry["identifier"])
        if why is not None:
            refused.append(why)
    if body.get("complete", True) is True:
        ard.index.replace_origin(origin, batch)
    return json_response({"accepted": len(body["entries"]) - len(refused),
                          "refused": refused[:50]})


async def status(request: web.Request) -> web.Response:
    ard = request.app[ARD]
    return json_response({
        "identifier": ard.identifier, "source": ard.source,
        "entries": len(ard.index.entries),
        "quarantined": [{"identifier": q.identifier, "origin": q.origin, "reason": q.reason}
                        for q in list(ard.index.quarantine.values())[-200:]],
        "crawls": [{"url": r.url, "status": r.status, "reason": r.reason,
                    "admitted": len(r.admitted), "refused": r.refused[:20]}
                   for r in list(ard.crawler.reports.values())[-200:]],
        "federation_dropped": dict(ard.federation.dropped),
    })
