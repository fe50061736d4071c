"""The skills this instance has, which a caller may see, and which one fits a task."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from butler.config.model import SkillConfig
from butler.memory import MemoryStore
from butler.skills import builtin, command, plugin
from butler.skills.base import SkillFunction
from butler.skills.builtin import echo, memory_skills
from butler.skills.command import command_skill
from butler.skills.fidelity import LOSSLESS, Fidelity
from butler.skills.plugin import load_plugin
from butler.skills.run_ledger import RunLedger
from internal.protocol.a2a.codec.input_schema import SchemaCheck
from internal.protocol.a2a.model import Identity

log = logging.getLogger("butler.skills")

RESERVED_PREFIXES = ("a2a.", "butler.", "admin.")


@dataclass(frozen=True)
class Skill:
    config: SkillConfig
    run: SkillFunction
    fidelity: Fidelity = field(default=LOSSLESS)

    @property
    def id(self) -> str:
        return self.config.id

    @cached_property
    def input_check(self) -> SchemaCheck | None:
        """Its declared input schema, compiled once; None when it declares none."""
        schema = self.config.input_schema
        return None if schema is None else SchemaCheck(schema)

    @cached_property
    def output_check(self) -> SchemaCheck | None:
        """Its output schema (an MCP tool's), compiled once; None when it has none."""
        schema = self.config.output_schema
        return None if schema is None else SchemaCheck(schema)

    @property
    def exposed(self) -> bool:
        """Reserved namespaces, and skills no bridge can carry, are never exposed, whatever
        the config says."""
        return (self.config.expose and not is_reserved(self.config.id)
                and self.fidelity.level != "unsupported")

    def visible_to(self, identity: Identity | None) -> bool:
        if not self.exposed:
            return False
        tier = self.config.tier
        if tier is None or identity is None:
            return tier is None
        return identity.is_admin or identity.tier == tier


def is_reserved(skill_id: str) -> bool:
    return skill_id.startswith(RESERVED_PREFIXES)


def build_skills(configs: Iterable[SkillConfig], memory: MemoryStore | None,
                 runs: RunLedger, secret_env: Collection[str]) -> list[Skill]:
    """Resolve every configured skill to code; raises ``PluginError`` for a bad entry.
    ``runs`` records each command skill's running process group. An ``mcp`` entry has no
    skill of its own: its server provides them once it runs (``SkillCatalog.provide``)."""
    memory_fns = memory_skills(memory) if memory is not None else {}
    skills = []
    for cfg in configs:
        if cfg.mcp is not None:
            continue
        if cfg.builtin == "echo":
            fn: SkillFunction = echo
            fidelity = builtin.FIDELITY
        elif cfg.builtin == "planner":
            fn, fidelity = builtin.planner, builtin.FIDELITY
        elif cfg.builtin is not None:
            fn, fidelity = memory_fns[cfg.builtin], builtin.FIDELITY
        elif cfg.command is not None:
            fn = command_skill(cfg.command, max_output_bytes=cfg.max_output_bytes, runs=runs,
                               secret_env=secret_env)
            fidelity = command.FIDELITY
        else:
            assert cfg.python is not None
            fn, fidelity = load_plugin(cfg.python), plugin.FIDELITY
        skills.append(Skill(cfg, fn, fidelity))
    return skills


class SkillCatalog:
    def __init__(self, skills: Iterable[Skill], allowed_capabilities: tuple[str, ...] | None):
        self._configured = tuple(skills)
        self._provided: dict[str, tuple[Skill, ...]] = {}
        self._skills = self._configured
        self._allowed = None if allowed_capabilities is None else frozenset(allowed_capabilities)
        self._visible: dict[str | None, list[Skill]] = {}
        # Bumped whenever the set of skills changes: what others built from it is stale.
        self.generation = 0

    def configure(self, skills: Iterable[Skill]) -> None:
        """The configured skills anew (a config reload); what MCP servers provide is kept.
        A task already running keeps the skill it started with."""
        self._configured = tuple(skills)
        self._skills = self._configured
        for source, provided in list(self._provided.items()):
            self.provide(source, provided)
        self._visible.clear()
        self.generation += 1

    def provide(self, source: str, skills: Sequence[Skill]) -> None:
        """Set the skills a provider (an MCP server, by its entry's id) has now, in place of
        what it had; a skill whose id is already taken is left out, with a warning."""
        others = {s.id for s in self._configured}
        for name, provided in self._provided.items():
            if name != source:
                others.update(s.id for s in provided)
        kept = []
        for skill in skills:
            if skill.id in others:
                log.warning("skill %r from %s is left out: the id is taken", skill.id, source)
                continue
            others.add(skill.id)
            kept.append(skill)
        self._provided[source] = tuple(kept)
        self._skills = self._configured + tuple(
            s for provided in self._provided.values() for s in provided)
        self._visible.clear()
        self.generation += 1

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

    def ids(self) -> list[str]:
        """Every skill's id, visible or not."""
        return [s.id for s in self._skills]

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
