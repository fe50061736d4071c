"""The intent router: which skill or peer a task in plain words is for.

Pure and deterministic: candidates in, a ranking out, no I/O and no model. Each
candidate's words are indexed once (``RouteIndex``), by field, with a weight per field
(an id, a name or a tag says more than a sentence of description). A task's score for a
candidate is the weighted share of the task's words the candidate covers:

    score = sum(idf(w) * field_weight(w, candidate) for the task's words it has)
            / sum(idf(w) * REFERENCE_WEIGHT for the task's words some candidate has
                  + idf(w) * UNKNOWN_WEIGHT for the words none has)

capped at 1, plus ``PEER_BONUS`` when the task names the candidate's peer ("my office").
``idf`` (rarer words count more) is taken over the candidate set, and a word no candidate
has counts as if one had it: asking for something nobody offers lowers every score.
docs/intent.md explains how to write cards that route well.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from operator import add

from butler.routing.words import terms, words

# How much a word found in each field of a card counts (its best field counts).
FIELD_WEIGHTS: dict[str, float] = {
    "id": 3.0, "name": 3.0, "tags": 3.0, "capabilities": 2.5, "peer": 2.0,
    "examples": 1.0, "description": 1.0,
}
# What a word of the task would count if matched in a strong field: the denominator.
REFERENCE_WEIGHT = 2.0
# A word no candidate has counts half as much: "remember that the car is due for service"
# is about notes even though no card says "car"; enough of them still sink every score.
UNKNOWN_WEIGHT = 1.0
PEER_BONUS = 0.1
DEFAULT_THRESHOLD = 0.4
SHOWN = 5
# Only the start of a long text is read: a request in plain words is a sentence or two,
# and a caller's megabyte of text must not hold the event loop.
ROUTED_CHARS = 2000
# A word on more than one candidate in this many is kept as a dense row (see RouteIndex).
DENSE_SHARE = 8

_STRONGEST_FIRST = sorted(FIELD_WEIGHTS, key=lambda f: -FIELD_WEIGHTS[f])

# Ties: a local skill before a peer, a peer as a whole before one of its skills (a task
# that only names the peer lets the peer choose).
_KIND_ORDER = {"local": 0, "peer": 1, "peer-skill": 2}


@dataclass(frozen=True, slots=True)
class RouteCandidate:
    """A local skill (``peer`` empty), a peer as a whole (``skill_id`` empty) or one
    skill of a peer's card."""

    skill_id: str
    peer: str = ""
    name: str = ""
    description: str = ""
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    cost_usd: Decimal = Decimal("0")
    source: str = "local"  # local, config (a peer entry), card (a peer's card), registry

    @property
    def kind(self) -> str:
        return "local" if not self.peer else "peer-skill" if self.skill_id else "peer"

    @property
    def label(self) -> str:
        if not self.peer:
            return self.skill_id
        return f"{self.peer}/{self.skill_id}" if self.skill_id else f"{self.peer} (peer)"

    def fields(self) -> dict[str, str]:
        return {"id": self.skill_id, "name": self.name, "tags": " ".join(self.tags),
                "capabilities": " ".join(self.capabilities), "peer": self.peer,
                "examples": " ".join(self.examples), "description": self.description}


@dataclass(frozen=True, slots=True)
class Match:
    word: str  # as the task wrote it
    fields: tuple[str, ...]  # where the candidate has it, strongest first
    points: float  # idf * field weight


@dataclass(frozen=True, slots=True)
class Scored:
    candidate: RouteCandidate
    score: float
    matches: tuple[Match, ...]
    peer_named: bool


@dataclass(frozen=True, slots=True)
class Ranking:
    text: str
    threshold: float
    ranked: tuple[Scored, ...]  # best first, at most ``SHOWN``, only those with a score
    ignored: tuple[str, ...] = ()  # the task's words that no candidate has

    @property
    def best(self) -> Scored | None:
        """The winner, when it reaches the threshold."""
        if self.ranked and self.ranked[0].score >= self.threshold:
            return self.ranked[0]
        return None

    def closest(self) -> str:
        """The closest candidates with their scores, for a refusal's message."""
        if not self.ranked:
            return "no candidate shares a word with the task"
        return ", ".join(f"{s.candidate.label} ({s.score:.2f})" for s in self.ranked)


@dataclass(slots=True)
class _Entry:
    candidate: RouteCandidate
    weights: dict[str, float] = field(default_factory=dict)  # stem -> best field weight
    where: dict[str, tuple[str, ...]] = field(default_factory=dict)  # stem -> fields


class RouteIndex:
    """Candidates' words, indexed once, with each word's points (idf times its best
    field's weight) per candidate precomputed; ``route`` then only adds up the points of
    the task's words. A word on many candidates keeps a dense row of points, added with
    one ``map`` (a loop in C) instead of one Python step per candidate."""

    def __init__(self, candidates: Iterable[RouteCandidate]) -> None:
        self._entries = [_index(c) for c in candidates]
        n = self._n = len(self._entries)
        postings: dict[str, list[tuple[int, float]]] = {}
        for i, entry in enumerate(self._entries):
            for stem, weight in entry.weights.items():
                postings.setdefault(stem, []).append((i, weight))
        self._idf = {stem: math.log(1 + (n + 1) / (len(p) + 0.5))
                     for stem, p in postings.items()}
        self._unknown_idf = math.log(1 + (n + 1) / 1.5)  # as rare as a word one card has
        self._sparse: dict[str, tuple[tuple[int, float], ...]] = {}
        self._dense: dict[str, list[float]] = {}
        for stem, posting in postings.items():
            idf = self._idf[stem]
            if len(posting) * DENSE_SHARE > n:
                row = [0.0] * n
                for i, weight in posting:
                    row[i] = idf * weight
                self._dense[stem] = row
            else:
                self._sparse[stem] = tuple((i, idf * weight) for i, weight in posting)
        self._named: dict[str, list[int]] = {}  # a word of a peer's name -> its candidates
        self._by_peer: dict[str, list[int]] = {}
        for i, entry in enumerate(self._entries):
            peer = entry.candidate.peer
            if peer:
                self._by_peer.setdefault(peer, []).append(i)
            for stem in set(words(peer)):
                self._named.setdefault(stem, []).append(i)

    def __len__(self) -> int:
        return self._n

    def route(self, text: str, threshold: float = DEFAULT_THRESHOLD,
              skip_peer: Callable[[str], bool] | None = None,
              allow: Callable[[RouteCandidate], bool] | None = None,
              ignore: Collection[str] = ()) -> Ranking:
        """``skip_peer``: peers whose candidates may not win this time (one already in
        the chain); ``allow``: which candidates may (asked only of those that scored);
        ``ignore``: words that say nothing here (the agent's own name, see ``words``)."""
        text = text[:ROUTED_CHARS]
        said = [(s, w) for s, w in terms(text) if s not in ignore]
        stems = list(dict.fromkeys(s for s, _ in said))
        total = sum(self._idf[s] * REFERENCE_WEIGHT if s in self._idf
                    else self._unknown_idf * UNKNOWN_WEIGHT for s in stems)
        if not total:
            return Ranking(text, threshold, ())
        acc = [0.0] * self._n
        for stem in stems:
            dense = self._dense.get(stem)
            if dense is not None:
                acc = list(map(add, acc, dense))
                continue
            for i, points in self._sparse.get(stem, ()):
                acc[i] += points
        if skip_peer is not None:
            for peer, members in self._by_peer.items():
                if skip_peer(peer):
                    for i in members:
                        acc[i] = 0.0
        if allow is not None:
            for i, points in enumerate(acc):
                if points and not allow(self._entries[i].candidate):
                    acc[i] = 0.0
        # In points: the share is capped at 1 (``total``), the bonus comes on top.
        scores = [p if p < total else total for p in acc]
        named = {i for stem in stems for i in self._named.get(stem, ()) if scores[i] > 0}
        for i in named:
            scores[i] += PEER_BONUS * total
        best = heapq.nlargest(SHOWN, scores)
        cut = max(best[-1], 1e-12) if best else 1e-12
        # The ties at the cut stay in: the full order below decides between them.
        shown = sorted([i for i, p in enumerate(scores) if p >= cut],
                       key=lambda i: self._order(i, scores[i] / total))[:SHOWN]
        written = {s: w for s, w in reversed(said)}
        ranked = tuple(Scored(self._entries[i].candidate, round(scores[i] / total, 4),
                              self._matches(i, stems, written), i in named) for i in shown)
        ignored = tuple(written[s] for s in stems if s not in self._idf)
        return Ranking(text, threshold, ranked, ignored)

    def _order(self, i: int, score: float) -> tuple[float, int, Decimal, str]:
        c = self._entries[i].candidate
        return (-round(score, 4), _KIND_ORDER[c.kind], c.cost_usd, c.label)

    def _matches(self, i: int, stems: Sequence[str], written: dict[str, str]) -> tuple[Match, ...]:
        entry = self._entries[i]
        return tuple(Match(written[s], entry.where[s], round(self._idf[s] * entry.weights[s], 3))
                     for s in stems if s in entry.weights)


def _index(candidate: RouteCandidate) -> _Entry:
    entry = _Entry(candidate)
    where: dict[str, list[str]] = {}
    fields = candidate.fields()
    for name in _STRONGEST_FIRST:  # so a word's first field is its best one
        for stem in set(words(fields[name])):
            if stem in where:
                where[stem].append(name)
            else:
                where[stem] = [name]
                entry.weights[stem] = FIELD_WEIGHTS[name]
    entry.where = {stem: tuple(names) for stem, names in where.items()}
    return entry


def route(text: str, candidates: Iterable[RouteCandidate],
          threshold: float = DEFAULT_THRESHOLD) -> Ranking:
    """Rank ``candidates`` for ``text`` (indexes them first: keep a ``RouteIndex`` to
    route many tasks against one set)."""
    return RouteIndex(candidates).route(text, threshold)


def explain(ranking: Ranking) -> str:
    """The ranking as lines a person can read: each candidate, its score, which words of
    the task matched which fields, and the verdict."""
    best = ranking.best
    lines = [f"task: {ranking.text!r}", f"threshold: {ranking.threshold:.2f}"]
    for n, s in enumerate(ranking.ranked, 1):
        why = "; ".join(f"{m.word!r} in {'/'.join(m.fields)} (+{m.points:g})"
                        for m in s.matches)
        if s.peer_named:
            why += f"; names peer {s.candidate.peer!r} (+{PEER_BONUS:g})"
        lines.append(f"{n}. {s.candidate.label}  score {s.score:.2f}  [{s.candidate.source}]"
                     f"  {why}")
    if ranking.ignored:
        lines.append("words no candidate has: " + ", ".join(ranking.ignored))
    if best is not None:
        lines.append(f"chosen: {best.candidate.label}")
    else:
        lines.append(f"chosen: none (no_capable_skill); closest: {ranking.closest()}")
    return "\n".join(lines)
