"""The lexical stage: BM25 over the candidates' fields (a BM25F), with the words that
card and task share.

Each field of a card counts a word once (``field_words``), weighted by the field (a name
or a tag says more than a sentence of description) and divided by how long that field
is next to the same field on other cards: a tag list of fifty words gives each of its
words a fifth of what a list of five does. The weighted count then saturates
(``K1``): a word in every field of a card counts little more than in two, so repeating
a word across fields cannot raise a score past a cap either.

A candidate's score is the share of the task's points it gets: the sum, over the task's
distinct words that some card has, of ``idf * saturated count``, divided by what a card
with each of those words in a strong field would get (``REFERENCE``), capped at 1. A
word that no card has is left out of both sides: it is not evidence for or against any
candidate (the calibration, not this score, decides what many such words mean).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from operator import add

from butler.routing.candidate import RouteCandidate
from butler.routing.words import words

FIELD_WEIGHTS: dict[str, float] = {
    "name": 3.0, "tags": 2.5, "id": 2.0, "capabilities": 2.0, "examples": 1.5,
    "description": 1.0,
}
# A word on more than one candidate in this many is kept as a dense row (see below).
DENSE_SHARE = 8
K1 = 1.2
B = 0.75
# What a word in a field of average length and weight 3 (a name) is worth: the denominator.
REFERENCE = 3.0 * (K1 + 1) / (3.0 + K1)


def saturate(tf: float) -> float:
    return tf * (K1 + 1) / (tf + K1)


class LexicalIndex:
    """Postings ``stem -> ((candidate, points), ...)`` computed once; ``score`` then adds
    up the points of a task's words."""

    def __init__(self, candidates: Sequence[RouteCandidate]) -> None:
        self.n = len(candidates)
        names = {w for c in candidates for w in words(c.peer)}
        per_field = [c.field_words(names) for c in candidates]
        avg = {f: max(1.0, sum(len(fw[f]) for fw in per_field) / max(1, self.n))
               for f in FIELD_WEIGHTS}
        counts: list[dict[str, float]] = []
        self.where: list[dict[str, tuple[str, ...]]] = []
        for fw in per_field:
            tf: dict[str, float] = {}
            where: dict[str, list[str]] = {}
            for f, stems in fw.items():
                norm = 1 - B + B * len(stems) / avg[f]
                for s in stems:
                    tf[s] = tf.get(s, 0.0) + FIELD_WEIGHTS[f] / norm
                    where.setdefault(s, []).append(f)
            counts.append(tf)
            self.where.append({s: tuple(sorted(fs, key=lambda f: -FIELD_WEIGHTS[f]))
                               for s, fs in where.items()})
        df: dict[str, int] = {}
        for tf in counts:
            for s in tf:
                df[s] = df.get(s, 0) + 1
        self.idf = {s: math.log(1 + (self.n - d + 0.5) / (d + 0.5)) for s, d in df.items()}
        # The idf of a word only one card has: what a word no card has is taken to be.
        self.rarest = math.log(1 + (self.n - 0.5) / 1.5) if self.n else 0.0
        postings: dict[str, list[tuple[int, float]]] = {}
        self._points: list[dict[str, float]] = []
        for i, tf in enumerate(counts):
            mine = {s: self.idf[s] * saturate(t) for s, t in tf.items()}
            self._points.append(mine)
            for s, p in mine.items():
                postings.setdefault(s, []).append((i, p))
        self.postings = {s: tuple(p) for s, p in postings.items()}
        # A word on many cards keeps a dense row of points, added with one ``map`` (a
        # loop in C) instead of one Python step per candidate.
        self._dense: dict[str, list[float]] = {}
        for s, posting in self.postings.items():
            if len(posting) * DENSE_SHARE > self.n:
                row = [0.0] * self.n
                for i, p in posting:
                    row[i] = p
                self._dense[s] = row

    def __contains__(self, stem: str) -> bool:
        return stem in self.idf

    def score(self, stems: Iterable[tuple[str, float]]) -> tuple[list[float], float]:
        """Each candidate's points for ``stems`` (each with a weight: 1 for a word as
        written, less for one spelled like it, see ngrams.py) and the points a
        candidate would need for a share of 1."""
        acc = [0.0] * self.n
        total = 0.0
        for stem, weight in stems:
            idf = self.idf.get(stem)
            if idf is None:
                continue
            total += idf * REFERENCE * weight
            dense = self._dense.get(stem)
            if dense is not None and weight == 1.0:
                acc = list(map(add, acc, dense))
                continue
            for i, points in self.postings[stem]:
                acc[i] += points * weight
        return acc, total

    def points(self, i: int, stem: str) -> float:
        return self._points[i].get(stem, 0.0)
