"""The storage seam: what every registry store does, and the errors it raises.

Semantics both stores share (one behaviour suite runs against each):
- an entry is live while ``expires_at > now``; an expired entry is treated as absent by
  every operation (get, query, heartbeat, delete, ownership, caps) even before a sweep
  removes it, so a restart with the clock moved on never revives it;
- the first live registration of a name binds it to the registering identity; once the
  entry expires the binding lapses with it and the name is free again;
- ``sweep`` only reclaims space.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from butler.registry.model import AgentEntry
from internal.protocol.a2a.model import AuthError, RequestError


class NameOwned(AuthError):
    def __init__(self, name: str) -> None:
        super().__init__("name_owned", f"agent name {name!r} is registered by another identity")


class QuotaExceeded(AuthError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            "name_quota_exceeded",
            f"this identity already holds {limit} live agent names, the limit",
            details={"limit": limit},
        )


class AgentNotFound(RequestError):
    def __init__(self, name: str) -> None:
        super().__init__("not_found", f"no live agent named {name!r}")


@dataclass(frozen=True, slots=True)
class Query:
    """Filters, all normalised and ANDed; ``words`` must all occur in the searchable text."""

    capability: str | None = None
    skill: str | None = None
    tag: str | None = None
    words: tuple[str, ...] = ()


class RegistryStore(Protocol):
    async def upsert(
        self, entry: AgentEntry, *, now: float, max_names: int
    ) -> tuple[AgentEntry, bool]:
        """Register or refresh; returns the stored entry and whether the name was new.

        Raises NameOwned or QuotaExceeded, leaving the store unchanged.
        """
        ...

    async def heartbeat(
        self, name: str, owner: str, *, now: float, ttl_seconds: int
    ) -> AgentEntry: ...

    async def delete(self, name: str, owner: str, *, now: float, force: bool = False) -> None: ...

    async def get(self, name: str, *, now: float) -> AgentEntry | None: ...

    async def query(
        self, query: Query, *, now: float, limit: int, after: str | None = None
    ) -> tuple[list[AgentEntry], str | None]:
        """Live entries in name order after ``after``; the second value is the name to
        continue after, or None on the last page."""
        ...

    async def count_live(self, *, now: float) -> int: ...

    async def ping(self) -> None:
        """Answers when the store does (raises Unavailable when not): cheap at any size,
        unlike ``count_live``, which counts."""
        ...

    async def sweep(self, *, now: float) -> int: ...

    async def close(self) -> None: ...


def redact_url(url: str) -> str:
    """A store URL fit for logs: any credentials replaced."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    if not sep or "@" not in authority:
        return url
    host = authority.rpartition("@")[2]
    return f"{scheme}://***@{host}{slash}{path}"
