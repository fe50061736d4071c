"""Words of a task or a card, as the intent router compares them.

NFKC and case folding first (so full-width letters and ``OFFICE`` are ``office``), then a
split on anything that is not a letter or a digit (``memory.search`` is two words), then
a small stop-word list and a light stemmer (``stem``), so "lights", "lighting" and
"lighted" all meet "light". No dictionary, no model: the same
text always gives the same words.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

_SPLIT = re.compile(r"[^\W_]+")

# Words that say nothing about which skill is wanted: grammar, politeness, the verbs
# of any request ("check", "ask") and what every agent is ("butler", "agent").
STOP_WORDS = frozenset("""
agent ask assistant butler check kindly know look see whether a about all am an and any
anything are as at be been but by can could do does did for from get give go got has
have hello hey hi how i if in into is it its just let like many me might more most much must
my need no
not now of on or our ours out over please pls really shall should show so some something
tell than thank thanks that the their them then there these they this those to up us
very want was we were what whats when where which who why will with would you your yours
""".split())  # noqa: SIM905 (a list of words reads as one)


# Cards and tasks repeat the same words: each is stemmed once (a bounded cache).
@lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """Strip a plural, then ``ing`` or ``ed``, then a final ``e``: "schedules",
    "scheduled" and "scheduling" are all ``schedul``. Short words are left alone."""
    if word.isdigit() or len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "shes", "ches", "xes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for ending in ("ing", "ed"):
        if word.endswith(ending) and not word.endswith("eed") \
                and len(word) - len(ending) >= 3:
            word = word[:-len(ending)]
            # "dimmed", "setting": the doubled consonant belongs to the ending
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]
            break
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


def terms(text: str) -> list[tuple[str, str]]:
    """``(stem, word as written)`` for each content word of ``text``, in order."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    # One letter alone ("what's" -> "what", "s") says nothing; one digit may ("floor 2").
    return [(stem(w), w) for w in _SPLIT.findall(folded)
            if w not in STOP_WORDS and (len(w) > 1 or w.isdigit())]


def words(text: str) -> list[str]:
    """The stemmed content words of ``text``, in order, repeats kept."""
    return [s for s, _ in terms(text)]
