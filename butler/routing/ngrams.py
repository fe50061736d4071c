"""The character n-gram stage: a word of the task meets the card words spelled like it.

"wether" is "weather", "translation" is "translate", "calender" is "calendar": a word of
the task that no card has as written is cut into its character 3-, 4- and 5-grams
(with the word's edges marked, so a start and an end count), and the card words that
share enough of them (Dice similarity ``MIN_SIMILARITY`` or more, the ``MAX_ALIKE``
closest) count, in proportion to the similarity, with the points the lexical stage
gives that card word. So the stage is BM25 over words as they are spelled rather than
as they are stemmed.

Grams miss a short word with one letter wrong ("balnce" shares 30 % of its grams with
"balance", "mnth" almost none with "month"), so a word is also alike a card word that
is the same once one letter is left out of either or both (a letter left out, added,
changed, two swapped), the first letter the same (``EDIT_SIMILARITY``). Found as
SymSpell does: each card word's one-deletion variants are indexed once, with the index,
and a task's word looks up itself and its own.

A word some card has as written counts as it does in the lexical stage; only the others
are looked up by their grams. The grams are taken over the cards' vocabulary (their
distinct words), not over whole texts, so a task costs one look-up per gram of its own
words, not one per candidate; each word's matches are kept (a bounded cache) because
tasks repeat words.
"""

from __future__ import annotations

from collections.abc import Sequence

from butler.routing.lexical import REFERENCE, LexicalIndex

SIZES = (3, 4, 5)
MIN_SIMILARITY = 0.5
# A word meets at most its closest few card words: enough for a typo and a word form,
# and a task's cost stays bounded however many card words look alike.
MAX_ALIKE = 3
# A word shorter than this is matched only as written ("tv", "pdf"): too few grams.
MIN_LENGTH = 4
# What a card word one edit away counts for, next to a gram similarity: about what
# "hotell" and "hotel" share (0.67), less than a word form shares with its stem.
EDIT_SIMILARITY = 0.7
_CACHED = 4096


def grams(word: str) -> frozenset[str]:
    padded = f"<{word}>"
    return frozenset(padded[i:i + n] for n in SIZES for i in range(len(padded) - n + 1))


def _deletions(word: str) -> set[str]:
    """``word`` and each way of leaving one of its letters out."""
    return {word, *(word[:i] + word[i + 1:] for i in range(len(word)))}


class SpellingIndex:
    def __init__(self, lexical: LexicalIndex) -> None:
        self._lexical = lexical
        self._vocab = sorted(lexical.idf)
        self._sizes = [len(grams(v)) for v in self._vocab]
        postings: dict[str, list[int]] = {}
        for j, v in enumerate(self._vocab):
            for g in grams(v):
                postings.setdefault(g, []).append(j)
        self._postings = postings
        # One-deletion variants (and the word itself) -> the card words, for one edit.
        self._deletes: dict[str, list[int]] = {}
        for j, v in enumerate(self._vocab):
            if len(v) >= MIN_LENGTH:
                for d in _deletions(v):
                    self._deletes.setdefault(d, []).append(j)
        self._cache: dict[str, tuple[tuple[str, float], ...]] = {}

    def alike(self, stem: str) -> tuple[tuple[str, float], ...]:
        """The card words spelled like ``stem``, each with its similarity, best first."""
        found = self._cache.get(stem)
        if found is not None:
            return found
        if len(stem) < MIN_LENGTH:
            found = ((stem, 1.0),) if stem in self._lexical else ()
        else:
            mine = grams(stem)
            shared: dict[int, int] = {}
            for g in mine:
                for j in self._postings.get(g, ()):
                    shared[j] = shared.get(j, 0) + 1
            alike = {j: round(2 * k / (len(mine) + self._sizes[j]), 3)
                     for j, k in shared.items()
                     if 2 * k >= MIN_SIMILARITY * (len(mine) + self._sizes[j])}
            for d in _deletions(stem):
                for j in self._deletes.get(d, ()):
                    if self._vocab[j][0] == stem[0] and alike.get(j, 0.0) < EDIT_SIMILARITY:
                        alike[j] = EDIT_SIMILARITY
            found = tuple(sorted(((self._vocab[j], sim) for j, sim in alike.items()),
                                 key=lambda m: (-m[1], m[0]))[:MAX_ALIKE])
        if len(self._cache) >= _CACHED:
            self._cache.clear()
        self._cache[stem] = found
        return found

    def score(self, stems: Sequence[str], exact: tuple[list[float], float]
              ) -> tuple[list[float], float]:
        """Like ``LexicalIndex.score``: each candidate's points, and the points a share
        of 1 needs. ``exact``: the lexical stage's, for the words some card has as
        written (they count as there); each other word counts with the card word
        spelled most like it, per candidate."""
        lexical = self._lexical
        acc, total = list(exact[0]), exact[1]
        for stem in stems:
            if stem in lexical:
                continue
            matches = self.alike(stem)
            if not matches:
                continue
            total += max(lexical.idf[v] * sim for v, sim in matches) * REFERENCE
            if len(matches) == 1:
                v, sim = matches[0]
                for i, points in lexical.postings[v]:
                    acc[i] += points * sim
                continue
            best: dict[int, float] = {}
            for v, sim in matches:
                for i, points in lexical.postings[v]:
                    p = points * sim
                    if p > best.get(i, 0.0):
                        best[i] = p
            for i, p in best.items():
                acc[i] += p
        return acc, total
