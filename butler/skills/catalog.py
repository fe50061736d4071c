"""The skills this instance has, which a caller may see, and which one fits a task."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from butler.config.model import SkillConfig
from butler.memory import MemoryStore
from butler.skills.base import SkillFunction
from butler.skills.builtin import echo, memory_skills
from butler.skills.command import command_skill
from butler.skills.plugin import load_plugin
from internal.protocol.a2a.model import Identity

RESERVED_PREFIXES = ("a2a.", "butler.", "admin.")


@dataclass(frozen=True)
class Skill:
    config: SkillConfig
    run: SkillFunction

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def exposed(self) -> bool:
        """Reserved namespaces are never exposed, whatever the config says."""
        return self.config.expose and not is_reserved(self.config.id)

    def visible_to(self, identity: Identity | None) -> bool:
        if not self.exposed:
            return False
        tier = self.config.tier
        if tier is None or identity is None:
            return tier is None
        return identity.is_admin or identity.tier == tier


def is_reserved(skill_id: str) -> bool:
    return skill_id.startswith(RESERVED_PREFIXES)


def build_skills(configs: Iterable[SkillConfig], memory: MemoryStore | None) -> list[Skill]:
    """Resolve every configured skill to code; raises ``PluginError`` for a bad entry."""
    memory_fns = memory_skills(memory) if memory is not None else {}
    skills = []
    for cfg in configs:
        if cfg.builtin == "echo":
            fn: SkillFunction = echo
        elif cfg.builtin is not None:
            fn = memory_fns[cfg.builtin]
        elif cfg.command is not None:
            fn = command_skill(cfg.command, max_output_bytes=cfg.max_output_bytes)
        else:
            assert cfg.python is not None
            fn = load_plugin(cfg.python)
        skills.append(Skill(cfg, fn))
    return skills


class SkillCatalog:
    def __init__(self, skills: Iterable[Skill], allowed_capabilities: tuple[str, ...] | None):
        self._skills = tuple(skills)
        self._allowed = None if allowed_capabilities is None else frozenset(allowed_capabilities)
        self._visible: dict[str | None, list[Skill]] = {}

    def _advertised(self, skill: Skill) -> bool:
        if self._allowed is None:
            return True
        return any(c in self._allowed for c in skill.config.capabilities)

    def visible(self, identity: Identity | None) -> list[Skill]:
        """Skills this caller may see and call (the card shows exactly these)."""
        # Visibility depends on the tier alone, and every task asks: computed once per tier.
        tier = None if identity is None else identity.tier
        found = self._visible.get(tier)
        if found is None:
            found = [s for s in self._skills if s.visible_to(identity) and self._advertised(s)]
            self._visible[tier] = found
        return list(found)

    def capabilities(self, identity: Identity | None) -> list[str]:
        caps: dict[str, None] = {}
        for skill in self.visible(identity):
            for cap in skill.config.capabilities:
                if self._allowed is None or cap in self._allowed:
                    caps[cap] = None
        return list(caps)

    def find(self, skill_id: str) -> Skill | None:
        return next((s for s in self._skills if s.id == skill_id), None)

    def select(
        self, identity: Identity | None, *, skill_id: str | None, capabilities: tuple[str, ...]
    ) -> Skill | None:
        """The cheapest visible skill that is ``skill_id`` or provides all ``capabilities``."""
        candidates = self.visible(identity)
        if skill_id is not None:
            return next((s for s in candidates if s.id == skill_id), None)
        if not capabilities:
            return None
        fitting = [s for s in candidates if set(capabilities) <= set(s.config.capabilities)]
        return min(fitting, key=lambda s: s.config.cost_usd, default=None)

    def default_skill(self, identity: Identity | None) -> Skill | None:
        """For a task naming neither skill nor capability: the first visible skill."""
        visible = self.visible(identity)
        return visible[0] if visible else None
