"""This instance's memories: a SQLite store with full-text search (``MemoryStore``)."""

from butler.memory._model import (
    MAX_KEY_CHARS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    MAX_TEXT_BYTES,
    Memory,
    SearchHit,
)
from butler.memory._query import build_match_expression, query_terms
from butler.memory._store import MemoryStore

__all__ = [
    "MAX_KEY_CHARS",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "MAX_TEXT_BYTES",
    "Memory",
    "MemoryStore",
    "SearchHit",
    "build_match_expression",
    "query_terms",
]
