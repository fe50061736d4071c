"""A memory, a search hit, and the checks a memory passes before it is stored."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

MAX_TEXT_BYTES: Final = 64 * 1024
MAX_KEY_CHARS: Final = 200
MAX_TAGS: Final = 32
MAX_TAG_CHARS: Final = 64


@dataclass(frozen=True, slots=True)
class Memory:
    id: str
    key: str | None
    text: str
    tags: tuple[str, ...]
    source: str
    created_at: str
    updated_at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "key": self.key,
            "text": self.text,
            "tags": list(self.tags),
            "source": self.source,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True, slots=True)
class SearchHit:
    memory: Memory
    score: float
    """Relevance, higher is better (negated bm25)."""
    snippet: str
    """Excerpt of the text with matched terms wrapped in SNIPPET_OPEN/SNIPPET_CLOSE."""

    def to_json(self) -> dict[str, Any]:
        return {"memory": self.memory.to_json(), "score": self.score, "snippet": self.snippet}


def validate_text(text: object) -> str:
    if not isinstance(text, str):
        raise ValueError("memory text must be a string")
    if not text.strip():
        raise ValueError("memory text must not be empty")
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_TEXT_BYTES:
        raise ValueError(f"memory text is {size} bytes; the limit is {MAX_TEXT_BYTES} bytes")
    return text


def validate_key(key: object) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str):
        raise ValueError("memory key must be a string or null")
    if not key.strip():
        raise ValueError("memory key must not be empty when given")
    if len(key) > MAX_KEY_CHARS:
        raise ValueError(
            f"memory key is {len(key)} characters; the limit is {MAX_KEY_CHARS} characters"
        )
    return key


def validate_tags(tags: object) -> tuple[str, ...]:
    # A bare string is a Sequence[str] too, and would otherwise become one tag per char.
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise ValueError("memory tags must be a list of strings")
    if len(tags) > MAX_TAGS:
        raise ValueError(f"too many memory tags ({len(tags)}); the limit is {MAX_TAGS}")
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str):
            raise ValueError("memory tags must be strings")
        if not tag.strip():
            raise ValueError("memory tags must not be empty")
        if len(tag) > MAX_TAG_CHARS:
            raise ValueError(
                f"memory tag {tag[:20]!r}... is {len(tag)} characters; "
                f"the limit is {MAX_TAG_CHARS} characters"
            )
        if tag not in out:
            out.append(tag)
    return tuple(out)


def validate_source(source: object) -> str:
    if not isinstance(source, str):
        raise ValueError("memory source must be a string")
    return source


def row_to_memory(row: Sequence[Any]) -> Memory:
    id_, key, text, tags_json, source, created_at, updated_at = row
    tags = json.loads(tags_json) if tags_json else []
    return Memory(
        id=str(id_),
        key=None if key is None else str(key),
        text=str(text),
        tags=tuple(str(t) for t in tags),
        source=str(source),
        created_at=str(created_at),
        updated_at=str(updated_at),
    )
