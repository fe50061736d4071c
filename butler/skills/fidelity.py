"""How faithfully a skill comes across a bridge: its ``bridge_fidelity`` (docs/skills.md).

Each runner declares what of the skill API it can carry: ``lossless`` when it speaks the
whole of it, ``adapted`` with the caveats a caller should know, ``unsupported`` when the
skill cannot be offered at all (it is withheld from the cards and the tools).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Level = Literal["lossless", "adapted", "unsupported"]


@dataclass(frozen=True)
class Fidelity:
    level: Level
    caveats: tuple[str, ...] = ()

    def with_caveats(self, *caveats: str) -> Fidelity:
        """This fidelity seen through one more bridge: ``lossless`` becomes ``adapted``."""
        added = tuple(dict.fromkeys((*self.caveats, *caveats)))
        if self.level == "unsupported" or added == self.caveats:
            return self
        return Fidelity("adapted", added)

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "caveats": list(self.caveats)}


LOSSLESS = Fidelity("lossless")
