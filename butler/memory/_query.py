"""Free user text to a safe FTS5 query: terms without stopwords, each quoted."""

from __future__ import annotations

import re
from typing import Final

MAX_SEARCH_LIMIT: Final = 100
# Bounds the MATCH expression built from an arbitrarily long user query.
MAX_QUERY_TERMS: Final = 32

# Words that carry no search signal in conversational queries such as
# "what do you know about the office printer?". Terms are OR-ed, so leaving these in
# would match nearly every memory.
_STOPWORDS_TEXT: Final = """
a about after again all also am an and any anything are as at be been before being
between both but by can could did do does doing done during each else ever few for
from get got had has have having he her here hers him his how i if in into is it its
itself just know knows let me might more most much must my near no nor not now of on
once only or other our ours own please re remember same say she should so some
something such tell than that the their theirs them then there these they thing
things this those through to too until us very was we were what whatever when where
which while who whom whose why will with would you your yours
"""
_STOPWORDS: Final = frozenset(_STOPWORDS_TEXT.split())

_WORD_RE: Final = re.compile(r"[^\W_]+")


def query_terms(query: str) -> list[str]:
    """Split user text into lowercased, de-duplicated search terms without stopwords."""
    terms: list[str] = []
    for word in _WORD_RE.findall(query.lower()):
        if word in _STOPWORDS or (len(word) == 1 and word.isascii() and word.isalpha()):
            continue
        if word not in terms:
            terms.append(word)
            if len(terms) >= MAX_QUERY_TERMS:
                break
    return terms


def build_match_expression(query: str) -> str | None:
    """Turn free text into a safe FTS5 MATCH expression, or None if it has no terms.

    Every term is a quoted string, so FTS5 operators and syntax in the user's text
    (AND, NEAR(, ", *, -, column filters) are treated as plain words.
    """
    parts: list[str] = []
    for term in query_terms(query):
        quoted = '"' + term.replace('"', '""') + '"'
        # Prefixing very short terms would match a large share of the vocabulary.
        parts.append(quoted + "*" if len(term) >= 3 else quoted)
    return " OR ".join(parts) if parts else None
