"""What the registry holds: agent entries, and how names and search terms are normalised."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import orjson

from internal.protocol.a2a.model import RequestError, agent_key

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_TERM = re.compile(r"[a-z0-9][a-z0-9._:/-]{0,127}")
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
MAX_URL = 2048
MAX_QUERY_WORDS = 8


def bad(path: str, problem: str) -> RequestError:
    return RequestError("invalid_request", f"{path}: {problem}")


fold = agent_key  # the registry's names compare as every agent name does


def has_control(text: str, *, multiline: bool = False) -> bool:
    for ch in text:
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Cs") and not (multiline and ch in "\t\n\r"):
            return True
        if ch in _BIDI:
            return True
    return False


def normalise_name(raw: str) -> str:
    """Fold case and Unicode compatibility forms, so look-alikes map to one name or none.

    Only ASCII letters, digits and ``. _ -`` survive, so "office" spelt with a Cyrillic o is
    rejected rather than registered beside "office".
    """
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in raw):
        raise bad("name", "must not contain control or invisible formatting characters")
    name = fold(raw)
    if not NAME_PATTERN.fullmatch(name):
        raise bad("name", f"{raw[:80]!r} must normalise to 1-64 characters from a-z 0-9 . _ - "
                   "starting with a letter or digit")
    return name


def normalise_term(raw: str, what: str) -> str:
    """A capability or skill id as indexed and as queried."""
    term = fold(raw) if isinstance(raw, str) else ""
    if not _TERM.fullmatch(term):
        raise bad(what, f"{str(raw)[:80]!r} must be 1-128 characters from a-z 0-9 . _ : / -")
    return term


def normalise_tag(raw: str, what: str = "tag") -> str:
    if not isinstance(raw, str) or has_control(raw):
        raise bad(what, "must be a string without control characters")
    tag = " ".join(fold(raw).split())
    if not tag or len(tag) > 64:
        raise bad(what, "must be 1-64 characters")
    return tag


# A word of free text: a run of letters and digits (FTS5's unicode61 tokens, which the
# SQLite store indexes; the Redis store indexes these).
_WORD = re.compile(r"[^\W_]+")


def text_words(text: str) -> set[str]:
    """The indexed words of folded text."""
    return set(_WORD.findall(text))


def query_tokens(words: tuple[str, ...]) -> tuple[str, ...]:
    """The indexed words a query needs: every word of every query word."""
    return tuple(dict.fromkeys(t for w in words for t in _WORD.findall(w)))


def query_words(text: str) -> tuple[str, ...]:
    if has_control(text):
        raise bad("q", "must not contain control characters")
    words = tuple(dict.fromkeys(fold(text).split()))
    if len(words) > MAX_QUERY_WORDS or any(len(w) > 128 for w in words):
        raise bad("q", f"at most {MAX_QUERY_WORDS} words of up to 128 characters")
    return words


def check_url(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_URL:
        raise bad(path, f"expected an http(s) URL of at most {MAX_URL} characters")
    if has_control(value) or any(ch.isspace() for ch in value):
        raise bad(path, "URL must not contain whitespace or control characters")
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises ValueError on a bad port
    except ValueError:
        raise bad(path, "not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad(path, "expected an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise bad(path, "URL must not carry credentials")
    return value


@dataclass(frozen=True, slots=True)
class AgentEntry:
    name: str
    display_name: str
    owner: str
    url: str
    card: Mapping[str, Any]
    description: str
    capabilities: tuple[str, ...]
    skills: tuple[str, ...]
    tags: tuple[str, ...]
    search_text: str
    registered_at: float
    expires_at: float
    ttl_seconds: int

    def matches(self, *, capability: str | None, skill: str | None, tag: str | None,
                words: tuple[str, ...]) -> bool:
        return ((capability is None or capability in self.capabilities)
                and (skill is None or skill in self.skills)
                and (tag is None or tag in self.tags)
                and all(w in self.search_text for w in words)
                and (not words
                     or text_words(self.search_text).issuperset(query_tokens(words))))

    def to_record(self) -> str:
        """The storage encoding: every field, times as epoch seconds."""
        return json.dumps({
            "name": self.name, "display_name": self.display_name, "owner": self.owner,
            "url": self.url, "card": self.card, "description": self.description,
            "capabilities": self.capabilities, "skills": self.skills, "tags": self.tags,
            "search_text": self.search_text, "registered_at": self.registered_at,
            "expires_at": self.expires_at, "ttl_seconds": self.ttl_seconds,
        }, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_record(cls, text: str | bytes, **fields: Any) -> AgentEntry:
        """``fields`` replace the record's own (a store that keeps some of them apart)."""
        try:
            d = orjson.loads(text)
        except orjson.JSONDecodeError:
            # What json.dumps may write and orjson refuses: integers past 64 bits, NaN,
            # lone surrogates. Floats, the only other difference that could matter, are
            # read to the same double by both.
            d = json.loads(text)
        d.update(fields)
        return cls(
            name=d["name"], display_name=d["display_name"], owner=d["owner"], url=d["url"],
            card=d["card"], description=d["description"],
            capabilities=tuple(d["capabilities"]), skills=tuple(d["skills"]),
            tags=tuple(d["tags"]), search_text=d["search_text"],
            registered_at=float(d["registered_at"]), expires_at=float(d["expires_at"]),
            ttl_seconds=int(d["ttl_seconds"]),
        )

    def to_json(self, now: float) -> dict[str, Any]:
        """The wire encoding: RFC 3339 times, and the seconds left as the registry sees them."""
        return {
            "name": self.name, "display_name": self.display_name, "owner": self.owner,
            "url": self.url, "description": self.description,
            "capabilities": list(self.capabilities), "skills": list(self.skills),
            "tags": list(self.tags), "registered_at": _iso(self.registered_at),
            "expires_at": _iso(self.expires_at), "ttl_seconds": self.ttl_seconds,
            "expires_in_seconds": max(0, round(self.expires_at - now, 3)), "card": self.card,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AgentEntry:
        return cls(
            name=str(d["name"]), display_name=str(d["display_name"]), owner=str(d["owner"]),
            url=str(d["url"]), card=dict(d["card"]), description=str(d["description"]),
            capabilities=tuple(map(str, d["capabilities"])), skills=tuple(map(str, d["skills"])),
            tags=tuple(map(str, d["tags"])), search_text="",
            registered_at=_epoch(d["registered_at"]), expires_at=_epoch(d["expires_at"]),
            ttl_seconds=int(d["ttl_seconds"]),
        )


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def _epoch(text: Any) -> float:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
