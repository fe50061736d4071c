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

Search is lexical: each entry's words, by field, in an inverted index; a query's score
is the weighted share of its words an entry has (0-100). ``type``, ``publisher``,
``tags`` and ``capabilities`` are term-indexed, so a filter on them reads only its
matches. Kept in memory: every origin is re-crawled, re-registered or re-pushed within
its lifetime, so a restarted registry fills it again from the store and the network.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

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
    fields: Mapping[str, frozenset[str]]
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


def entry_fields(entry: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    name = f"{entry.get('displayName', '')} {str(entry.get('identifier', '')).rsplit(':', 1)[-1]}"
    return {
        "name": frozenset(words(name)),
        "capabilities": frozenset(w for c in entry.get("capabilities", []) for w in words(c)),
        "tags": frozenset(w for t in entry.get("tags", []) for w in words(t)),
        "queries": frozenset(w for q in entry.get("representativeQueries", [])
                             for w in words(q)),
        "description": frozenset(words(str(entry.get("description", "")))),
    }


def score(fields: Mapping[str, frozenset[str]], tokens: tuple[str, ...]) -> int:
    """0-100: the weighted share of ``tokens`` found, each where it counts most."""
    if not tokens:
        return 0
    got = 0
    for token in tokens:
        got += max((w for name, w in _FIELD_WEIGHTS if token in fields.get(name, ())), default=0)
    return round(100 * got / (_MAX_WEIGHT * len(tokens)))


@dataclass
class CatalogIndex:
    entries: dict[str, Indexed] = field(default_factory=dict)
    quarantine: dict[tuple[str, str], Quarantined] = field(default_factory=dict)
    pins: dict[str, PublicKey] = field(default_factory=dict)
    _words: dict[str, set[str]] = field(default_factory=dict)
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
                       entry_fields(entry), current.indexed_at if current is not None else now)
        self.entries[identifier] = item
        self._origins.setdefault(origin, set()).add(identifier)
        for words_ in item.fields.values():
            for word in words_:
                self._words.setdefault(word, set()).add(identifier)
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
        self._origins.get(item.origin, set()).discard(identifier)
        for words_ in item.fields.values():
            for word in words_:
                _discard(self._words, word, identifier)
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
                max(item.expires_at, expires_at), item.key, item.fields, item.indexed_at)

    def origin_of(self, origin: str) -> list[Indexed]:
        return [self.entries[i] for i in sorted(self._origins.get(origin, ()))]

    def expire(self, now: float) -> int:
        gone = [i for i, item in self.entries.items() if item.expires_at <= now]
        for identifier in gone:
            self._remove(identifier)
        return len(gone)

    # --- reading ----------------------------------------------------------------------

    def matching(self, filters: Mapping[str, tuple[str, ...]], now: float,
                 tokens: tuple[str, ...] = ()) -> Iterator[Indexed]:
        """Live entries with any of ``tokens`` (when given) that pass every filter."""
        sets: list[set[str]] = []
        if tokens:
            hit: set[str] = set()
            for token in tokens:
                hit |= self._words.get(token, set())
            sets.append(hit)
        for path in INDEXED_TERMS:
            if path in filters:
                sets.append(set().union(*(self._terms.get((path, fold(v)), set())
                                          for v in filters[path])))
        rest = {p: frozenset(fold(v) for v in vs) for p, vs in filters.items()
                if p not in INDEXED_TERMS}
        candidates: Iterable[str] = sorted(sets, key=len)[0] if sets else list(self.entries)
        for identifier in candidates:
            item = self.entries.get(identifier)
            if item is None or item.expires_at <= now:
                continue
            if any(identifier not in s for s in sets):
                continue
            if all(any(fold(v) in wanted for v in item.values(p))
                   for p, wanted in rest.items()):
                yield item


def _discard(index: dict[Any, set[str]], key: Any, identifier: str) -> None:
    found = index.get(key)
    if found is not None:
        found.discard(identifier)
        if not found:
            del index[key]
