"""Two simple retrieval baselines over the candidates' texts, to measure a router against.

- ``Bm25``: Okapi BM25 (k1 = 1.2, b = 0.75) over lower-cased words, English stop words
  dropped, no stemming.
- ``CharTfidf``: TF-IDF over character n-grams of 3 to 5 letters (within words padded
  with a space, as scikit-learn's ``char_wb``; smooth idf), cosine similarity.

Each only scores; ``Baseline`` takes the best-scoring candidate when its score reaches a
decline threshold, chosen on the tuning half (``choose_threshold``). Pure Python.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP_TEXT = """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not now of off on once only or other our ours
ourselves out over own please same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself
yourselves hi hello hey thanks thank ok okay yes
"""
STOP_WORDS = frozenset(_STOP_TEXT.split())


def words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]


class Bm25:
    name = "BM25"

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self._docs = [Counter(words(d)) for d in documents]
        self._lengths = [sum(c.values()) for c in self._docs]
        n = len(self._docs)
        self._avg = (sum(self._lengths) / n) if n else 0.0
        df: Counter[str] = Counter()
        for counts in self._docs:
            df.update(counts.keys())
        # Okapi's idf, kept non-negative (the "+1" form) so a word on most cards adds little.
        self._idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}
        self._postings: dict[str, list[tuple[int, int]]] = {}
        for i, counts in enumerate(self._docs):
            for w, tf in counts.items():
                self._postings.setdefault(w, []).append((i, tf))

    def scores(self, text: str) -> list[float]:
        out = [0.0] * len(self._docs)
        k1, b, avg = self.k1, self.b, self._avg or 1.0
        for w in set(words(text)):
            idf = self._idf.get(w)
            if idf is None:
                continue
            for i, tf in self._postings[w]:
                norm = k1 * (1 - b + b * self._lengths[i] / avg)
                out[i] += idf * tf * (k1 + 1) / (tf + norm)
        return out


def char_ngrams(text: str, low: int = 3, high: int = 5) -> Counter[str]:
    grams: Counter[str] = Counter()
    for w in _WORD.findall(text.lower()):
        padded = f" {w} "
        for n in range(low, high + 1):
            if len(padded) < n:
                break
            grams.update(padded[i:i + n] for i in range(len(padded) - n + 1))
    return grams


class CharTfidf:
    name = "TF-IDF char 3-5"

    def __init__(self, documents: Sequence[str]) -> None:
        grams = [char_ngrams(d) for d in documents]
        n = len(grams)
        df: Counter[str] = Counter()
        for g in grams:
            df.update(g.keys())
        self._idf = {g: math.log((1 + n) / (1 + f)) + 1 for g, f in df.items()}
        self._postings: dict[str, list[tuple[int, float]]] = {}
        self._n = n
        for i, g in enumerate(grams):
            vec = {k: tf * self._idf[k] for k, tf in g.items()}
            norm = math.sqrt(sum(v * v for v in vec.values())) or 1.0
            for k, v in vec.items():
                self._postings.setdefault(k, []).append((i, v / norm))

    def scores(self, text: str) -> list[float]:
        out = [0.0] * self._n
        query = {k: tf * self._idf[k] for k, tf in char_ngrams(text).items() if k in self._idf}
        norm = math.sqrt(sum(v * v for v in query.values()))
        if not norm:
            return out
        for k, v in query.items():
            weight = v / norm
            for i, d in self._postings[k]:
                out[i] += weight * d
        return out


Scorer = Callable[[str], list[float]]


class Baseline:
    """A scorer plus a decline threshold: the best candidate, if it scores at least that."""

    def __init__(self, name: str, scorer: Scorer, labels: Sequence[str]) -> None:
        self.name, self.scorer, self.labels = name, scorer, labels
        self.threshold = 0.0

    def ranked(self, text: str, k: int = 3) -> list[tuple[str, float]]:
        scores = self.scorer(text)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
        return [(self.labels[i], scores[i]) for i in order if scores[i] > 0]

    def decide(self, text: str) -> tuple[str | None, list[str]]:
        """The chosen label (None: declined) and the top three."""
        top = self.ranked(text)
        chosen = top[0][0] if top and top[0][1] >= self.threshold else None
        return chosen, [label for label, _ in top]


def choose_threshold(top_scores: Sequence[tuple[float, bool, bool]]) -> float:
    """The threshold that gets most tuning requests right. Each item: the best score, whether
    the best candidate is the right one, whether the request should be declined. A
    threshold t accepts a best score >= t; tried halfway between each two scores seen, at 0
    and above the highest."""
    scores = sorted({s for s, _, _ in top_scores})
    cuts = [0.0, *((a + b) / 2 for a, b in itertools.pairwise(scores)), math.inf]
    best_cut, best_right = 0.0, -1
    for cut in cuts:
        right = sum((s >= cut and ok) or (s < cut and decline)
                    for s, ok, decline in top_scores)
        if right > best_right:
            best_cut, best_right = cut, right
    return best_cut
