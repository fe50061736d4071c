"""Who is calling, as the bindings and the engine see it once a token has been checked."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is calling: the peer name a token is bound to (or an anonymous label) and its tier."""

    name: str
    tier: str = "default"
    bound: bool = False

    @property
    def is_admin(self) -> bool:
        return self.tier == "admin"
