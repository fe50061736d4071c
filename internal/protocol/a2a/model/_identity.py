"""Who is calling, as the bindings and the engine see it once a token has been checked."""

from __future__ import annotations

import unicodedata
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


def agent_key(name: str) -> str:
    """What two agent names must share to be the same agent: NFKC, then case folding (and
    NFKC again, since folding can undo it, e.g. U+0130). Loop detection, chain checks
    and the registry all compare names this way."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
