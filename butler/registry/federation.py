"""Federation: asking upstream registries (``federation: auto``), merging what they say
with the local index, and gossip between trusted registries.

An upstream's answer is a claim. It is asked through the one outbound guard (the
operator named its URL, so loopback and private networks are open, as for peers from the
config), within the search's deadline, with a hop limit and the list of registries the
request has passed (``ARD-Hop-Limit``, ``ARD-Via``: request headers, as ARD's search body
admits no other field), so registries that list each other never loop. Its results are
checked as crawled entries are (``check_entry``): what fails is dropped. Its scores and
page tokens are ignored: every result is scored again here, and paging is this
registry's own. A copy whose signature fails, or that another key signed than the one
the identifier is pinned to, or than a more trusted copy's, is dropped and counted.

Gossip: every ``gossip_interval_seconds`` (and soon after the index changes) a registry
pushes its own signed entries to each trusted upstream (``POST /v1/gossip``), which
accepts them only from an identity named like one of its own trusted upstreams and
checks each entry's signature with the agent's key, so no registry in between can
alter one. A push replaces what that registry pushed before; entries lapse after
``gossip_ttl_seconds`` unless pushed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from butler.registry.ard_query import SearchRequest
from butler.registry.catalog_entry import check_entry, entry_key
from butler.registry.catalog_index import CatalogIndex
from butler.registry.federation_config import FederationConfig, Upstream
from internal.http import CONFIGURED, OutboundGuard, outbound_session, read_capped
from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.model import ButlerError
from internal.signing import BadSignature, PublicKey

log = logging.getLogger("butler.registry")

HOP_HEADER = "ARD-Hop-Limit"
VIA_HEADER = "ARD-Via"
DEADLINE_HEADER = "ARD-Deadline-Ms"
MAX_ANSWER_BYTES = 8 * 1024 * 1024
RESULT_ONLY = ("score", "source", "sourceTrust")
GOSSIP_BATCH = 500
PUSH_GAP_SECONDS = 2.0


@dataclass(frozen=True)
class Candidate:
    entry: dict[str, Any]
    source: str
    trust: str  # local, trusted, listed
    key: PublicKey | None


@dataclass(frozen=True)
class Hop:
    """Where a search may still go: hops left, registries passed, time left."""

    hops: int
    via: tuple[str, ...]
    deadline: float  # monotonic

    def headers(self, own: str) -> dict[str, str]:
        left = max(0, int((self.deadline - time.monotonic()) * 1000))
        return {HOP_HEADER: str(self.hops - 1), VIA_HEADER: ", ".join((*self.via, own)),
                DEADLINE_HEADER: str(left)}


def hop_from(headers: Any, config: FederationConfig) -> Hop:
    """The request's limits, never looser than this registry's own."""
    hops = config.max_hops
    raw = headers.get(HOP_HEADER, "")
    if raw.isascii() and raw.isdigit():
        hops = min(hops, int(raw))
    via = tuple(v.strip() for v in headers.get(VIA_HEADER, "").split(",") if v.strip())[:16]
    seconds = config.deadline_seconds
    raw = headers.get(DEADLINE_HEADER, "")
    if raw.isascii() and raw.isdigit():
        seconds = min(seconds, int(raw) / 1000)
    return Hop(hops, via, time.monotonic() + seconds)


class Federation:
    def __init__(self, config: FederationConfig, index: CatalogIndex, own_id: str,
                 guard: OutboundGuard | None = None) -> None:
        self.config = config
        self.index = index
        self.own_id = own_id
        self.guard = guard or OutboundGuard(CONFIGURED)
        self.dropped: Counter[str] = Counter()  # why upstream copies were dropped
        self._session: aiohttp.ClientSession | None = None
        self._pushed_version = -1
        self.changed = asyncio.Event()

    @property
    def merged(self) -> list[Upstream]:
        """The upstreams whose results are merged, trusted first."""
        ups = [u for u in self.config.upstreams if u.trust != "referral"]
        return sorted(ups, key=lambda u: u.trust != "trusted")

    def referrals(self) -> list[dict[str, str]]:
        return [u.referral() for u in self.config.upstreams]

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = outbound_session(self.guard, limit=64)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- federation: auto ------------------------------------------------------------

    async def ask_upstreams(self, request: SearchRequest, want: int,
                            hop: Hop) -> list[tuple[Upstream, list[dict[str, Any]]]]:
        """Each merged upstream's checked entries; one that is slow, down or answers
        garbage contributes nothing, and the answer still comes by the deadline."""
        if hop.hops <= 0 or self.own_id in hop.via:
            return []
        ups = [u for u in self.merged if u.identifier not in hop.via]
        left = hop.deadline - time.monotonic()
        if not ups or left <= 0:
            return []
        tasks = [asyncio.ensure_future(self._ask(u, request, want, hop)) for u in ups]
        done, pending = await asyncio.wait(tasks, timeout=left)
        for task in pending:
            task.cancel()
            self.dropped["deadline"] += 1
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        answers = []
        for upstream, task in zip(ups, tasks, strict=True):
            if task in done and task.exception() is None:
                answers.append((upstream, task.result()))
            elif task in done:
                self.dropped["unreachable"] += 1
                log.info("upstream registry %s: %s", upstream.name, task.exception())
        return answers

    async def _ask(self, upstream: Upstream, request: SearchRequest, want: int,
                   hop: Hop) -> list[dict[str, Any]]:
        query: dict[str, Any] = {"text": request.text}
        if request.filters:
            query["filter"] = {k: list(v) for k, v in request.filters.items()}
        body = {"query": query, "pageSize": min(100, want),
                "federation": "auto" if hop.hops > 1 else "none"}
        headers = {"Authorization": f"Bearer {upstream.token}", "Accept": "application/json",
                   "Content-Type": "application/json", **hop.headers(self.own_id)}
        async with self.session().post(upstream.url + "/search",
                                       data=exact_json.dumps_bytes(body), headers=headers,
                                       allow_redirects=False) as resp:
            raw = await read_capped(resp.content.iter_chunked(64 * 1024), MAX_ANSWER_BYTES,
                                    announced=resp.content_length)
            if resp.status != 200:
                raise RuntimeError(f"answered HTTP {resp.status}")
        try:
            answer = exact_json.loads(raw, max_depth=32)
        except ButlerError:
            raise RuntimeError("answered something that is not JSON") from None
        results = answer.get("results") if isinstance(answer, dict) else None
        if not isinstance(results, list):
            raise RuntimeError("answered without a results list")
        found = []
        for item in results[:100]:
            entry = {k: v for k, v in item.items() if k not in RESULT_ONLY} \
                if isinstance(item, dict) else item
            try:
                found.append(check_entry(entry))
            except ButlerError:
                self.dropped["malformed"] += 1
        return found

    def merge(self, local: Sequence[Candidate],
              answers: Sequence[tuple[Upstream, list[dict[str, Any]]]]) -> list[Candidate]:
        """One copy per identifier: the local one, else the first trusted upstream's, else
        the first listed one's; a copy signed by another key is dropped and counted."""
        chosen: dict[str, Candidate] = {c.entry["identifier"]: c for c in local}
        for upstream, entries in answers:
            for entry in entries:
                identifier = entry["identifier"]
                try:
                    key = entry_key(entry)
                except BadSignature:
                    self.dropped["bad_signature"] += 1
                    continue
                held = chosen.get(identifier)
                pinned = held.key if held is not None else self.index.pins.get(identifier)
                if pinned is not None and key is not None and key != pinned:
                    self.dropped["key_conflict"] += 1
                    continue
                if held is not None:
                    continue  # a copy from a registry trusted as much or more
                if pinned is not None and key is None:
                    self.dropped["unsigned_copy"] += 1
                    continue
                chosen[identifier] = Candidate(entry, upstream.url, upstream.trust, key)
        return list(chosen.values())

    # --- gossip ----------------------------------------------------------------------

    def gossip_targets(self) -> list[Upstream]:
        return [u for u in self.config.upstreams if u.trust == "trusted" and u.token]

    async def push_forever(self) -> None:
        failures = 0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), self.config.gossip_interval_seconds)
            self.changed.clear()
            try:
                await self.push()
                failures = 0
            except Exception as exc:  # the next round tries again
                failures += 1
                log.warning("gossip push failed (%d time(s) in a row): %s", failures, exc)
            # Changes that come in a burst (many registrations) make one push, not many.
            await asyncio.sleep(min(PUSH_GAP_SECONDS, self.config.gossip_interval_seconds))

    async def push(self) -> None:
        """Every own signed entry, to every trusted upstream."""
        own = [item.entry for item in self.index.entries.values()
               if item.trust == "local" and item.key is not None]
        batches = [own[i:i + GOSSIP_BATCH] for i in range(0, len(own), GOSSIP_BATCH)] or [[]]
        for upstream in self.gossip_targets():
            for number, batch in enumerate(batches):
                body = {"registry": self.own_id, "entries": batch,
                        "ttlSeconds": self.config.gossip_ttl_seconds,
                        "complete": number == len(batches) - 1, "batch": number}
                headers = {"Authorization": f"Bearer {upstream.token}",
                           "Content-Type": "application/json"}
                timeout = aiohttp.ClientTimeout(total=max(5.0, self.config.deadline_seconds))
                try:
                    async with self.session().post(
                            upstream.url + "/v1/gossip", data=exact_json.dumps_bytes(body),
                            headers=headers, timeout=timeout, allow_redirects=False) as resp:
                        await resp.read()
                        if resp.status != 200:
                            log.info("gossip to %s: HTTP %d", upstream.name, resp.status)
                            break
                except (aiohttp.ClientError, TimeoutError, ButlerError) as exc:
                    log.info("gossip to %s failed: %s", upstream.name,
                             getattr(exc, "message", None) or exc or type(exc).__name__)
                    break
