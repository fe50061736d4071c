"""The intent router: which skill or peer a task in plain words is for.

Pure and deterministic: candidates in, a ranking out, no I/O. ``RouteIndex`` indexes
the candidates once; for each task, three stages score every candidate:

- lexical (lexical.py): BM25 over the cards' fields, with a cap per field;
- n-grams (ngrams.py): the same, with words matched as they are spelled (typos, forms);
- semantic (semantic.py, optional): a static embedding model's cosine, for a task that
  shares no word with the card it means ("am I overdrawn?" and a bank account).

Fusion (fusion.py) makes them one score with the locality prior and the peer-name
bonus; calibration (calibration.py) makes that a confidence that the choice is right,
and the best candidate is chosen when its confidence reaches the threshold.
docs/intent.md explains how to write cards that route well.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from butler.routing import semantic as semantic_stage
from butler.routing.calibration import CLOSE, DEFAULT_THRESHOLD, confidence
from butler.routing.candidate import RouteCandidate
from butler.routing.fusion import NAMED_BONUS, fuse, prior
from butler.routing.lexical import REFERENCE, LexicalIndex
from butler.routing.ngrams import SpellingIndex
from butler.routing.words import terms, words

__all__ = ["DEFAULT_THRESHOLD", "Match", "Ranking", "RouteCandidate", "RouteIndex", "Scored",
           "explain", "route"]

log = logging.getLogger("butler.routing")

SHOWN = 5
# What a word no card has counts in a share's denominator, next to a known word's 1.
UNKNOWN_WEIGHT = 0.5
# The confidence of the best candidate of a peer the task names (see ``route``).
NAMED_CONFIDENCE = 0.9
# Only the start of a long text is read: a paragraph is placed by its first sentences,
# and a caller's megabyte of text must not hold the event loop.
ROUTED_CHARS = 2000

# Ties: a local skill before a peer, a peer as a whole before one of its skills (a task
# that only names the peer lets the peer choose).
_KIND_ORDER = {"local": 0, "peer": 1, "peer-skill": 2}


@dataclass(frozen=True, slots=True)
class Match:
    word: str  # as the task wrote it
    fields: tuple[str, ...]  # where the candidate has it, strongest first
    points: float  # its lexical points (idf times the field's saturated weight)
    card_word: str = ""  # the card's word, when it is only spelled alike


@dataclass(frozen=True, slots=True)
class Scored:
    candidate: RouteCandidate
    score: float  # the confidence that this candidate is the right one, 0..1
    matches: tuple[Match, ...]
    peer_named: bool
    fused: float = 0.0
    stages: tuple[tuple[str, float], ...] = ()  # each stage's share, 0..1
    notes: tuple[str, ...] = ()  # priors and caps applied, for ``explain``
    # The calibration's inputs (fused, margin, known, semantic, coverage), see
    # calibration.py: what bench/intent_fit.py fits the confidence on.
    features: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Ranking:
    text: str
    threshold: float
    ranked: tuple[Scored, ...]  # best first, at most ``shown``, only those with a score
    ignored: tuple[str, ...] = ()  # the task's words that no candidate has
    stages: tuple[str, ...] = ()  # the stages that ran
    reason: str = ""  # why nothing could be chosen, when the text alone says so
    known: float = 0.0  # the share of the task's words that some card has

    @property
    def best(self) -> Scored | None:
        """The winner, when it reaches the threshold."""
        if self.ranked and self.ranked[0].score >= self.threshold:
            return self.ranked[0]
        return None

    @property
    def rivals(self) -> tuple[Scored, ...]:
        """When the best is a toss-up: it and the others within ``CLOSE`` of its
        confidence (empty when the best is clear, or there is none)."""
        best = self.best
        if best is None:
            return ()
        # A peer as a whole is no rival to its own skill: it would choose that skill.
        close = tuple(s for s in self.ranked[1:] if best.score - s.score <= CLOSE
                      and not (s.candidate.peer == best.candidate.peer
                               and "peer" in (s.candidate.kind, best.candidate.kind)))
        return (best, *close) if close else ()

    def closest(self) -> str:
        """The closest candidates with their scores, for a refusal's message."""
        if not self.ranked:
            return self.reason or "no candidate shares a word with the task"
        return ", ".join(f"{s.candidate.label} ({s.score:.2f})" for s in self.ranked)

    def as_json(self) -> dict[str, object]:
        best = self.best
        return {
            "text": self.text, "threshold": self.threshold, "stages": list(self.stages),
            "chosen": best.candidate.label if best is not None else None, "known": self.known,
            "rivals": [s.candidate.label for s in self.rivals],
            "reason": self.reason or (None if best is not None else "below_threshold"),
            "ignored_words": list(self.ignored),
            "ranked": [{"label": s.candidate.label, "skill_id": s.candidate.skill_id,
                        "peer": s.candidate.peer or None, "source": s.candidate.source,
                        "confidence": s.score, "fused": s.fused, "stages": dict(s.stages),
                        "peer_named": s.peer_named, "notes": list(s.notes),
                        "matches": [{"word": m.word, "fields": list(m.fields),
                                     "points": m.points, "card_word": m.card_word or None}
                                    for m in s.matches]}
                       for s in self.ranked],
        }


@dataclass(frozen=True, slots=True)
class Evidence:
    said: list[tuple[str, str]]  # (stem, word as written) for each content word
    stems: list[str]  # the distinct stems, in order
    shares: dict[str, list[float]]  # stage -> each candidate's share, 0..1
    named: list[bool]  # per candidate: the task names its peer
    known: float  # the share of the task's words that some card has


@dataclass(slots=True)
class _Excluded:
    """Candidates left out of the index, and why (for ``explain``)."""

    clones: dict[str, str] = field(default_factory=dict)  # registry label -> original


class RouteIndex:
    """The candidates indexed once by every stage; ``route`` then scores a task.

    ``semantic``: use the semantic stage when it is installed (its model is loaded on the
    first task routed, not before)."""

    def __init__(self, candidates: Iterable[RouteCandidate], *, semantic: bool = True) -> None:
        kept, self.excluded = _without_clones(list(candidates))
        self._candidates = kept
        self._lexical = LexicalIndex(kept)
        self._spelling = SpellingIndex(self._lexical)
        self._priors = [prior(c) for c in kept]
        self._noted: dict[int, tuple[str, ...]] = {}
        self._use_semantic = semantic
        self._semantic: semantic_stage.SemanticIndex | None = None
        self._named: dict[str, list[int]] = {}  # a word of a peer's name -> its candidates
        self._by_peer: dict[str, list[int]] = {}
        for i, c in enumerate(kept):
            if c.peer:
                self._by_peer.setdefault(c.peer, []).append(i)
        # A peer is named by a word of its name or, for a peer as a whole, of its card's
        # name ("ShopMate") that no other agent's card has: a peer called "calendar" is
        # not named by every task about a calendar. Such a word counts once, for every
        # candidate of that peer alike.
        address: dict[str, set[str]] = {}
        owner: dict[str, set[str]] = {}  # a word of a peer's name -> the peers it names
        for c in kept:
            for stem in words(c.peer):
                owner.setdefault(stem, set()).add(c.peer)
        for c in kept:
            if c.peer:
                said = {*words(c.peer), *(words(c.name) if c.kind == "peer" else ())}
                address.setdefault(c.peer, set()).update(s for s in said if owner.get(
                    s, {c.peer}) == {c.peer} and all(
                    kept[i].peer == c.peer for i, _ in self._lexical.postings.get(s, ())))
        for i, c in enumerate(kept):
            for stem in address.get(c.peer, ()):
                self._named.setdefault(stem, []).append(i)

    def __len__(self) -> int:
        return len(self._candidates)

    @property
    def stages(self) -> tuple[str, ...]:
        return stages(self._use_semantic and bool(self._candidates))

    def route(self, text: str, threshold: float = DEFAULT_THRESHOLD,
              skip_peer: Callable[[str], bool] | None = None,
              allow: Callable[[RouteCandidate], bool] | None = None,
              ignore: Collection[str] = (), shown: int = SHOWN) -> Ranking:
        """``skip_peer``: peers whose candidates may not win this time (one already in
        the chain); ``allow``: which candidates may (asked only of those that scored);
        ``ignore``: words that say nothing here (the agent's own name, see ``words``);
        ``shown``: how many candidates the ranking lists."""
        text = text[:ROUTED_CHARS]
        ev = self.evidence(text, ignore)
        stages = tuple(ev.shares) or self.stages
        if not ev.stems:
            return Ranking(text, threshold, (), stages=stages,
                           reason="the task has no words to route by (only greetings or "
                                  "words any request has)")
        if not ev.known and "semantic" not in stages:
            return Ranking(text, threshold, (), stages=stages,
                           reason="no word of the task is on any card (a language no card "
                                  "is written in? the semantic stage is not installed)")
        shares, named, known, stems = ev.shares, ev.named, ev.known, ev.stems
        n = len(self._candidates)
        fused = fuse(shares, self._priors, named)
        if skip_peer is not None:
            for peer, members in self._by_peer.items():
                if skip_peer(peer):
                    for i in members:
                        fused[i] = 0.0
        if allow is not None:
            for i, f in enumerate(fused):
                if f and not allow(self._candidates[i]):
                    fused[i] = 0.0
        named_peers = {self._candidates[i].peer for i in range(n) if named[i]}
        for peer in named_peers:
            self._let_the_peer_choose(peer, fused, shares)
        top = heapq.nlargest(shown + 1, range(n), key=fused.__getitem__)
        top = [i for i in top if fused[i] > 0]
        top.sort(key=lambda i: self._order(i, fused[i]))
        stage_set = frozenset(stages)
        written = {s: w for s, w in reversed(ev.said)}
        # A task that names a peer has chosen the agent: its candidates compete with the
        # other agents' for the confidence, not with one another (the peer can decide).
        others = {p: max((f for j, f in enumerate(fused) if self._candidates[j].peer != p),
                         default=0.0) for p in named_peers}
        ranked = []
        for i in top[:shown]:
            peer = self._candidates[i].peer
            rival = others[peer] if named[i] else max(
                (fused[j] for j in top if j != i), default=0.0)
            matches = self._matches(i, stems, written)
            features = (fused[i], fused[i] - rival, known,
                        shares["semantic"][i] if "semantic" in shares else 0.0,
                        len(matches) / len(stems))
            sure = confidence(stage_set, *features)
            if named[i] and i == top[0] and rival < fused[i] / 2:
                # Naming an agent is choosing it, when no other agent fits half as well.
                sure = max(sure, NAMED_CONFIDENCE)
            ranked.append(Scored(
                self._candidates[i], round(sure, 4), matches, named[i], round(fused[i], 4),
                tuple((s, round(v[i], 4)) for s, v in shares.items()), self._notes(i),
                features))
        ignored = tuple(written[s] for s in stems
                        if not self._spelling.alike(s) and s not in self._named)
        return Ranking(text, threshold, tuple(ranked), ignored, stages, known=known)

    def _let_the_peer_choose(self, peer: str, fused: list[float],
                             shares: dict[str, list[float]]) -> None:
        """The task names ``peer``: if no word of it is on any of the peer's skills (only
        the semantic stage places one), the peer as a whole goes first and decides."""
        members = self._by_peer.get(peer, [])
        whole = next((i for i in members if self._candidates[i].kind == "peer"), None)
        skills = [i for i in members if i != whole and fused[i] > 0]
        if whole is None or not fused[whole] or not skills:
            return
        if all(shares["lexical"][i] == 0 and shares["ngrams"][i] == 0 for i in skills):
            fused[whole] = max(fused[whole], max(fused[i] for i in skills) + 1e-3)

    @property
    def candidates(self) -> tuple[RouteCandidate, ...]:
        return tuple(self._candidates)

    def evidence(self, text: str, ignore: Collection[str] = ()) -> Evidence:
        """Each stage's share for every candidate (what ``route`` fuses; the calibration
        script fits on it)."""
        said = [(s, w) for s, w in terms(text[:ROUTED_CHARS]) if s not in ignore]
        stems = list(dict.fromkeys(s for s, _ in said))
        n = len(self._candidates)
        if not stems:
            return Evidence(said, stems, {}, [False] * n, 0.0)
        unknown = [s for s in stems if not self._spelling.alike(s) and s not in self._named]
        # A word no card has is not evidence against a candidate, but it is not nothing:
        # it counts a little in what a share of 1 needs (see lexical.py).
        missing = len(unknown) * UNKNOWN_WEIGHT * self._lexical.rarest * REFERENCE
        lex_points, lex_total = self._lexical.score((s, 1.0) for s in stems)
        ng_points, ng_total = self._spelling.score(stems, (lex_points, lex_total))
        shares = {"lexical": _shares(lex_points, lex_total + missing),
                  "ngrams": _shares(ng_points, ng_total + missing)}
        if "semantic" in self.stages:
            semantic = self._semantic_scores(text[:ROUTED_CHARS])
            if semantic is not None:
                shares["semantic"] = semantic
        named = [False] * n
        for stem in stems:
            for i in self._named.get(stem, ()):
                named[i] = True
        return Evidence(said, stems, shares, named, 1 - len(unknown) / len(stems))

    def _semantic_scores(self, text: str) -> list[float] | None:
        """The semantic stage's cosines, or None (and the stage off for this index) when
        its model cannot be loaded: the other stages still route."""
        try:
            if self._semantic is None:
                self._semantic = semantic_stage.SemanticIndex(
                    [c.text() for c in self._candidates])
            return self._semantic.score(text)
        except Exception as exc:
            log.warning("the router's semantic stage failed, routing without it: %r", exc)
            self._use_semantic = False
            return None

    def _order(self, i: int, fused: float) -> tuple[float, int, Decimal, str]:
        c = self._candidates[i]
        return (-round(fused, 4), _KIND_ORDER[c.kind], c.cost_usd, c.label)

    def _matches(self, i: int, stems: Sequence[str], written: dict[str, str]
                 ) -> tuple[Match, ...]:
        where = self._lexical.where[i]
        out = []
        for s in stems:
            for card_word, _ in self._spelling.alike(s):
                if card_word in where:
                    out.append(Match(written[s], where[card_word],
                                     round(self._lexical.points(i, card_word), 3),
                                     "" if card_word == s else card_word))
                    break
        return tuple(out)

    def _notes(self, i: int) -> tuple[str, ...]:
        """A candidate's notes depend on it alone: made once per index, when it is
        first ranked (not per task: reading its fields again was a fifth of a route)."""
        notes = self._noted.get(i)
        if notes is None:
            notes = self._noted[i] = self._make_notes(i)
        return notes

    def _make_notes(self, i: int) -> tuple[str, ...]:
        c = self._candidates[i]
        notes = []
        p = self._priors[i]
        if p < 1:
            why = "a peer as a whole, below its own skills; " if c.kind == "peer" else ""
            notes.append(f"prior x{p:g} ({why}{c.source}: locality, see docs/intent.md)")
        fields = c.fields()
        raw = {"tags": c.tags, "examples": c.examples, "capabilities": c.capabilities}
        for name, items in raw.items():
            if len(items) > len(fields[name]):
                notes.append(f"{name} capped: {len(fields[name])} of {len(items)} read")
        if len(c.description) > len(fields["description"][0] if fields["description"] else ""):
            notes.append("description capped")
        return tuple(notes)


def stages(semantic: bool = True) -> tuple[str, ...]:
    """The stages a router runs here: the semantic one only when ``semantic`` and its
    extra is installed (the agent card says which, docs/intent.md)."""
    on = semantic and semantic_stage.available()
    return ("lexical", "ngrams", "semantic") if on else ("lexical", "ngrams")


def _shares(points: list[float], total: float) -> list[float]:
    if not total:
        return [0.0] * len(points)
    return [p / total if p < total else 1.0 for p in points]


def _without_clones(candidates: list[RouteCandidate]
                    ) -> tuple[list[RouteCandidate], _Excluded]:
    """A registry entry whose card copies a configured peer's word for word is left out:
    the configured peer is the one whose key this instance trusts (docs/intent.md)."""
    excluded = _Excluded()
    trusted = {_content(c): c.label for c in candidates if c.source in ("config", "card")}
    kept = []
    for c in candidates:
        original = trusted.get(_content(c)) if c.source.startswith("registry") else None
        if original is not None and (c.name or c.description or c.tags or c.examples):
            excluded.clones[c.label] = original
            continue
        kept.append(c)
    return kept, excluded


def _content(c: RouteCandidate) -> tuple[object, ...]:
    return (c.kind, c.skill_id, c.name.casefold(), c.description.casefold(),
            tuple(t.casefold() for t in c.tags), tuple(e.casefold() for e in c.examples))


def route(text: str, candidates: Iterable[RouteCandidate],
          threshold: float = DEFAULT_THRESHOLD) -> Ranking:
    """Rank ``candidates`` for ``text`` (indexes them first: keep a ``RouteIndex`` to
    route many tasks against one set)."""
    return RouteIndex(candidates).route(text, threshold)


def explain(ranking: Ranking) -> str:
    """The ranking as lines a person can read: the stages that ran, each candidate with
    its confidence and each stage's share, which words of the task matched which fields,
    the priors and caps applied, and the verdict."""
    best = ranking.best
    lines = [f"task: {ranking.text!r}",
             f"stages: {', '.join(ranking.stages)}"
             + ("" if "semantic" in ranking.stages else
                " (semantic: not installed or off; pip install 'butler-a2a[semantic]')"),
             f"threshold: {ranking.threshold:.2f}"]
    for n, s in enumerate(ranking.ranked, 1):
        stages = " ".join(f"{name} {v:.2f}" for name, v in s.stages)
        lines.append(f"{n}. {s.candidate.label}  confidence {s.score:.2f}  fused {s.fused:.3f}"
                     f"  [{s.candidate.source}]  {stages}")
        why = [f"{m.word!r}" + (f" ~ {m.card_word!r}" if m.card_word else "")
               + f" in {'/'.join(m.fields)} (+{m.points:g})" for m in s.matches]
        if s.peer_named:
            why.append(f"names peer {s.candidate.peer!r} (+{NAMED_BONUS:g})")
        why += list(s.notes)
        if why:
            lines.append("     " + "; ".join(why))
    if ranking.ignored:
        lines.append("words no candidate has: " + ", ".join(ranking.ignored))
    rivals = ranking.rivals
    if best is not None:
        lines.append(f"chosen: {best.candidate.label}"
                     + (f" (close call: {', '.join(r.candidate.label for r in rivals)})"
                        if rivals else ""))
    elif ranking.reason:
        lines.append(f"chosen: none (no_capable_skill): {ranking.reason}")
    else:
        lines.append(f"chosen: none (no_capable_skill): confidence below the threshold; "
                     f"closest: {ranking.closest()}")
    return "\n".join(lines)
