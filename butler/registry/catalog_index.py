"""The registry's index of AI Catalog entries, which ARD's API (``ard_api.py``) reads.

Entries come from three places, each an *origin* whose entries are replaced together:
a registered agent (``agent:<name>``: its card's entry at once, then its crawled
catalog), a configured catalog (``catalog:<url>``) and a trusted registry's gossip
(``gossip:<name>``). Each carries where it was indexed (``source``), how far it is
trusted (``local``, ``trusted``, ``listed``) and when it lapses.

Key continuity, as the registry keeps it for names (``keys.py``): the first key that
signs an identifier is pinned to it; a copy signed by another key is admitted only with
rotation statements leading from the pinned key to it, and is otherwise quarantined with
the reason, and the identifier leaves the results until its publisher sorts it out. A
signature that does not verify quarantines the copy the same way. An unsigned copy never
replaces a signed one.

Search is lexical: each entry's words, each with the weight of the heaviest field it
is in, kept with the entry (so weighing a candidate is a lookup per query word) and in
an inverted index; a query's score is the weighted share of its words an entry has
(0-100). Each word's postings are kept in order, heaviest field first, then by
identifier, and a query reads at most ``SEARCH_CANDIDATES`` of them in all: a word on
fewer entries than its share is read whole, so the results are exact unless every word
of the query is a common one (then its best-placed entries, by field and identifier,
are the ones scored). ``type``, ``publisher``, ``tags`` and ``capabilities`` are
term-indexed, so a filter on them reads only its matches. Identifiers are kept sorted,
so a listing in their order reads only its page (``page``). Kept in memory: every
origin is re-crawled, re-registered or re-pushed within its lifetime, so a restarted
registry fills it again from the store and the network.
"""

from __future__ import annotations

import heapq
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from sortedcontainers import SortedList

from butler.registry.catalog_entry import entry_key, entry_rotations, publisher_of
from butler.registry.model import fold
from internal.signing import BadSignature, PublicKey, rotated_to

TRUST_RANK = {"local": 0, "trusted": 1, "listed": 2}
INDEXED_TERMS = ("type", "publisher", "tags", "capabilities")
_WORD = re.compile(r"[^\W_]+")
# Words a request for an agent says without saying what it wants.
STOP_WORDS = frozenset({
    "a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "do", "find", "for", "from",
    "get", "give", "help", "i", "in", "is", "it", "me", "my", "of", "on", "or", "please", "some",
    "that", "the", "this", "to", "want", "with", "you",
})
# How much a query word counts where it is found: in the name, capabilities or tags (3),
# in a representative query (2), in the description (1).
_FIELD_WEIGHTS = (("name", 3), ("capabilities", 3), ("tags", 3), ("queries", 2),
                  ("description", 1))
_MAX_WEIGHT = 3
Ids = set[str] | frozenset[str]
_NONE: frozenset[str] = frozenset()
# The postings one text search scores at most (shared among its words).
SEARCH_CANDIDATES = 1200


def words(text: str) -> list[str]:
    return _WORD.findall(fold(text))


def query_tokens(text: str) -> tuple[str, ...]:
    """The words a search looks for: without stop words, unless there is nothing else."""
    found = list(dict.fromkeys(words(text)))[:16]
    meaningful = [w for w in found if w not in STOP_WORDS]
    return tuple(meaningful or found)


def values_at(entry: Mapping[str, Any], path: str) -> list[str]:
    """Every value at a dot path, lists flattened (a filter matches any), as text."""
    if path == "publisher":
        return [publisher_of(str(entry.get("identifier", "")))]
    current: list[Any] = [entry]
    for part in path.split("."):
        step: list[Any] = []
        for value in current:
            if isinstance(value, dict) and part in value:
                found = value[part]
                step.extend(found if isinstance(found, list) else [found])
        current = step
    return [str(v).lower() if isinstance(v, bool) else str(v)
            for v in current if not isinstance(v, dict | list) and v is not None]


def matches_filters(entry: Mapping[str, Any], source: str,
                    filters: Mapping[str, tuple[str, ...]]) -> bool:
    """Every filter key has a value among the entry's (case-insensitive)."""
    for path, wanted in filters.items():
        found = [source] if path == "source" else values_at(entry, path)
        folded = {fold(v) for v in wanted}
        if not any(fold(v) in folded for v in found):
            return False
    return True


@dataclass(frozen=True, slots=True)
class Indexed:
    entry: dict[str, Any]  # as published
    identifier: str
    origin: str
    source: str
    trust: str
    expires_at: float
    key: PublicKey | None  # the key it is signed by, verified
    weights: Mapping[str, int]  # its words (``entry_weights``), each string shared
    indexed_at: float  # when this registry first indexed the identifier

    @property
    def publisher(self) -> str:
        return publisher_of(self.identifier)

    def values(self, path: str) -> list[str]:
        return [self.source] if path == "source" else values_at(self.entry, path)


@dataclass(frozen=True, slots=True)
class Quarantined:
    identifier: str
    origin: str
    reason: str
    at: float


def entry_weights(entry: Mapping[str, Any]) -> dict[str, int]:
    """Each word of an entry with the weight of the heaviest field it is in
    (``_FIELD_WEIGHTS``): what a query word is worth to it."""
    name = f"{entry.get('displayName', '')} {str(entry.get('identifier', '')).rsplit(':', 1)[-1]}"
    fields = {
        "name": words(name),
        "capabilities": [w for c in entry.get("capabilities", []) for w in words(c)],
        "tags": [w for t in entry.get("tags", []) for w in words(t)],
        "queries": [w for q in entry.get("representativeQueries", []) for w in words(q)],
        "description": words(str(entry.get("description", ""))),
    }
    found: dict[str, int] = {}
    for field_name, weight in _FIELD_WEIGHTS:
        for word in fields[field_name]:
            if found.get(word, 0) < weight:
                found[word] = weight
    return found


def score(weights: Mapping[str, int], tokens: tuple[str, ...]) -> int:
    """0-100: the weighted share of ``tokens`` found, each where it counts most."""
    if not tokens:
        return 0
    return round(100 * sum(weights.get(t, 0) for t in tokens) / (_MAX_WEIGHT * len(tokens)))


@dataclass
class CatalogIndex:
    entries: dict[str, Indexed] = field(default_factory=dict)
    quarantine: dict[tuple[str, str], Quarantined] = field(default_factory=dict)
    pins: dict[str, PublicKey] = field(default_factory=dict)
    # word -> its entries' identifiers, sorted, by the weight of the heaviest field it is
    # in: [3, 2, 1]
    _words: dict[str, list[SortedList]] = field(default_factory=dict)
    _order: SortedList = field(default_factory=SortedList)  # every identifier
    _next_expiry: float = float("inf")  # no entry lapses before this
    _terms: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    _origins: dict[str, set[str]] = field(default_factory=dict)
    version: int = 0  # bumped on every change: gossip pushes what changed since

    # --- writing ----------------------------------------------------------------------

    def admit(self, entry: dict[str, Any], *, origin: str, source: str, trust: str,
              expires_at: float, now: float) -> str | None:
        """Index one checked entry; the reason it was not indexed, or None."""
        identifier = entry["identifier"]
        try:
            key = entry_key(entry)
        except BadSignature as exc:
            return self._quarantine(identifier, origin, f"signature: {exc.message}", now)
        current = self.entries.get(identifier)
        if key is None and current is not None and current.key is not None:
            return f"{identifier}: unsigned, and a signed copy is indexed"
        pinned = self.pins.get(identifier)
        if key is not None and pinned is not None and key != pinned \
                and not rotated_to(pinned, key.kid, entry_rotations(entry)):
            self._remove(identifier)
            return self._quarantine(
                identifier, origin, f"key {key.kid} replaces the pinned key {pinned.kid} "
                "without a rotation statement signed by it", now)
        if current is not None and current.origin != origin and \
                TRUST_RANK[current.trust] < TRUST_RANK[trust] and current.expires_at > now:
            return f"{identifier}: a more trusted copy is indexed"
        if key is not None:
            self.pins[identifier] = key
        self.quarantine.pop((identifier, origin), None)
        current = self.entries.get(identifier)
        self._remove(identifier)
        item = Indexed(entry, identifier, origin, source, trust, expires_at, key,
                       _shared(entry_weights(entry)),
                       current.indexed_at if current is not None else now)
        self.entries[identifier] = item
        self._order.add(identifier)
        self._next_expiry = min(self._next_expiry, expires_at)
        self._origins.setdefault(origin, set()).add(identifier)
        for word, weight in item.weights.items():
            if word not in self._words:
                self._words[word] = [SortedList(), SortedList(), SortedList()]
            self._words[word][_MAX_WEIGHT - weight].add(identifier)
        for path in INDEXED_TERMS:
            for value in values_at(entry, path):
                self._terms.setdefault((path, fold(value)), set()).add(identifier)
        self.version += 1
        return None

    def _quarantine(self, identifier: str, origin: str, reason: str, now: float) -> str:
        self.quarantine[(identifier, origin)] = Quarantined(identifier, origin, reason, now)
        if len(self.quarantine) > 10_000:  # the oldest reasons go first
            del self.quarantine[next(iter(self.quarantine))]
        return f"{identifier} quarantined: {reason}"

    def _remove(self, identifier: str) -> None:
        item = self.entries.pop(identifier, None)
        if item is None:
            return
        self._order.discard(identifier)
        self._origins.get(item.origin, set()).discard(identifier)
        for word, weight in item.weights.items():
            postings = self._words.get(word)
            if postings is not None:
                postings[_MAX_WEIGHT - weight].discard(identifier)
                if not any(postings):
                    del self._words[word]
        for path in INDEXED_TERMS:
            for value in values_at(item.entry, path):
                _discard(self._terms, (path, fold(value)), identifier)
        self.version += 1

    def replace_origin(self, origin: str, keep: Iterable[str]) -> int:
        """Drop what ``origin`` indexed before and did not index again (``keep``)."""
        gone = self._origins.get(origin, set()) - set(keep)
        for identifier in gone:
            self._remove(identifier)
        return len(gone)

    def drop_origin(self, origin: str) -> None:
        for identifier in list(self._origins.pop(origin, ())):
            self._remove(identifier)

    def extend_origin(self, origin: str, expires_at: float) -> None:
        for identifier in self._origins.get(origin, ()):
            item = self.entries[identifier]
            self.entries[identifier] = Indexed(
                item.entry, item.identifier, item.origin, item.source, item.trust,
                max(item.expires_at, expires_at), item.key, item.weights, item.indexed_at)

    def origin_of(self, origin: str) -> list[Indexed]:
        return [self.entries[i] for i in sorted(self._origins.get(origin, ()))]

    def expire(self, now: float) -> int:
        gone = [i for i, item in self.entries.items() if item.expires_at <= now]
        for identifier in gone:
            self._remove(identifier)
        self._next_expiry = min((i.expires_at for i in self.entries.values()),
                                default=float("inf"))
        return len(gone)

    def expire_due(self, now: float) -> None:
        """Lapsed entries out, when there may be any (so a count of a term's entries
        counts only live ones)."""
        if now >= self._next_expiry:
            self.expire(now)

    # --- reading ----------------------------------------------------------------------

    def matching(self, filters: Mapping[str, tuple[str, ...]], now: float,
                 tokens: tuple[str, ...] = ()) -> Iterator[Indexed]:
        """Live entries with any of ``tokens`` (when given) that pass every filter."""
        sets: list[Ids] = []
        if tokens:
            hit: set[str] = set()
            for token in tokens:
                for postings in self._words.get(token, ()):
                    hit.update(postings)
            sets.append(hit)
        sets += self._term_sets(filters)
        sets.sort(key=len)
        candidates: Iterable[str] = sets[0].intersection(*sets[1:]) if sets \
            else list(self.entries)
        entries = self.entries
        for identifier in candidates:
            item = entries[identifier]
            if self._passes(item, filters, now):
                yield item

    def ranked(self, tokens: tuple[str, ...], filters: Mapping[str, tuple[str, ...]],
               now: float, limit: int) -> list[tuple[int, Indexed]]:
        """The ``limit`` best live matches of ``tokens`` that pass ``filters``, with
        their scores (``score``'s). Read: at most ``SEARCH_CANDIDATES`` postings, each
        word's share in its order (heaviest field first), or, when a term filter has
        fewer entries than that, every entry it has."""
        if not tokens:
            return []
        sets = sorted(self._term_sets(filters), key=len)
        pool: Iterable[str]
        if sets and len(sets[0]) <= SEARCH_CANDIDATES:
            pool = sets[0]
        else:
            share = SEARCH_CANDIDATES // len(tokens)
            read: dict[str, None] = {}
            for token in tokens:
                left = share
                for postings in self._words.get(token, ()):
                    read.update(dict.fromkeys(postings.islice(0, left)))
                    left -= min(left, len(postings))
                    if not left:
                        break
            pool = read
        entries = self.entries
        items = [item for item in (entries[i] for i in pool) if item.expires_at > now]
        if sets:
            items = [item for item in items if all(item.identifier in s for s in sets)]
        # Their points a word at a time: one pass over the candidates per word.
        points = [0] * len(items)
        for token in tokens:
            points = [p + item.weights.get(token, 0)
                      for p, item in zip(points, items, strict=True)]
        other = any(path not in INDEXED_TERMS for path in filters)
        scored = [(-p, TRUST_RANK[item.trust], item.identifier, item)
                  for p, item in zip(points, items, strict=True)
                  if p and (not other or self._passes(item, filters, now))]
        whole_weight = _MAX_WEIGHT * len(tokens)
        return [(round(100 * -s[0] / whole_weight), s[3])
                for s in heapq.nsmallest(limit, scored)]

    def page(self, filters: Mapping[str, tuple[str, ...]], after: str, size: int,
             now: float) -> tuple[list[Indexed], int] | None:
        """Live entries past ``after`` in identifier order that pass ``filters``, at
        most ``size``, and how many pass in all; None when a filter is not on a
        term-indexed field (the caller reads every match). The page is read from the
        sorted identifiers, or, when the filter's matches are few, from them."""
        if any(path not in INDEXED_TERMS for path in filters):
            return None
        self.expire_due(now)
        sets = sorted(self._term_sets(filters), key=len)
        if not sets:
            return [self.entries[i] for i in islice(
                self._order.irange(minimum=after, inclusive=(False, False)), size)], \
                len(self.entries)
        first, rest = sets[0], sets[1:]
        total = len(first) if not rest else len(first.intersection(*rest))
        if len(first) ** 2 <= size * len(self._order):  # few: sorting them is cheaper
            chosen = heapq.nsmallest(size, (i for i in first if i > after
                                            and all(i in s for s in rest)))
        else:  # many: the sorted identifiers hold one every few places
            chosen = list(islice((i for i in self._order.irange(
                minimum=after, inclusive=(False, False)) if i in first
                and all(i in s for s in rest)), size))
        return [self.entries[i] for i in chosen], total

    def _term_sets(self, filters: Mapping[str, tuple[str, ...]]) -> list[Ids]:
        """Per filtered term field, the identifiers with any of its values: the index's
        own set when there is one value (read only; a copy of a large one is the cost
        of the whole request)."""
        found: list[Ids] = []
        for path in INDEXED_TERMS:
            if path in filters:
                sets = [self._terms.get((path, fold(v)), _NONE) for v in filters[path]]
                found.append(sets[0] if len(sets) == 1 else set().union(*sets))
        return found

    @staticmethod
    def _passes(item: Indexed, filters: Mapping[str, tuple[str, ...]], now: float) -> bool:
        """Live, and every filter not answered by a term index passes."""
        if item.expires_at <= now:
            return False
        return all(any(fold(v) in {fold(w) for w in wanted} for v in item.values(path))
                   for path, wanted in filters.items() if path not in INDEXED_TERMS)


def _shared(weights: dict[str, int]) -> dict[str, int]:
    """``weights`` with each word the one string every entry and the postings share
    (an index holds each word once, not once per entry that has it)."""
    return {sys.intern(word): weight for word, weight in weights.items()}


def _discard(index: dict[Any, set[str]], key: Any, identifier: str) -> None:
    found = index.get(key)
    if found is not None:
        found.discard(identifier)
        if not found:
            del index[key]
