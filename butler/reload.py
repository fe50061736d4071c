"""A config reload (SIGHUP, ``systemctl reload butler``): the file is read again and what
can change in a running daemon changes in place: the token hashes it accepts (with their
tiers, grants and spend caps), its peers and its skills. Connections, streams and running
tasks are untouched: a request already past the gate keeps its identity, a task keeps the
skill or peer it started with.

A new config that does not load (a bad key, an unset token variable, a plugin that does not
import, no token left) is refused as a whole: the running config stays, and the log says
why. What else changed (the port, the data folder, hosted agents, MCP servers...) is named
in a warning and takes effect at the next restart."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path

from butler.config.model import Config
from butler.delegation.delegator import PeerDelegator
from butler.delegation.peers import from_config
from butler.engine.run import Delegator
from butler.http_app import anonymous_identity
from butler.skills.catalog import Skill, SkillCatalog
from butler.swarm.spend import SpendBook
from internal.http import TokenVerifier
from internal.protocol.a2a.model import SetupError

log = logging.getLogger("butler.reload")

# The parts of a config a reload changes; every other difference waits for a restart.
RELOADED_A2A = ("tokens", "caller_limits", "anonymous_tier")
RELOADED = ("peers", "skills", "secret_env")


@dataclass(frozen=True)
class LiveParts:
    """What a reload changes in place, as the started daemon holds it."""

    verifier: TokenVerifier
    spend: SpendBook
    catalog: SkillCatalog
    delegator: Delegator | None
    build_skills: Callable[[Config], list[Skill]]
    data_dir: Path


def needs_restart(old: Config, new: Config) -> list[str]:
    """The keys that differ between ``old`` and ``new`` beyond what a reload changes."""
    merged = replace(new, a2a=replace(new.a2a, **{k: getattr(old.a2a, k) for k in RELOADED_A2A}),
                     **{k: getattr(old, k) for k in RELOADED})
    changed = [f"configurations.a2a.{f.name}" for f in fields(merged.a2a)
               if getattr(merged.a2a, f.name) != getattr(old.a2a, f.name)]
    changed += [f.name for f in fields(merged)
                if f.name != "a2a" and getattr(merged, f.name) != getattr(old, f.name)]
    if [s for s in old.skills if s.mcp] != [s for s in new.skills if s.mcp]:
        changed.append("skills (the MCP servers')")
    return changed


async def reload_config(current: Config, load: Callable[[], Config], parts: LiveParts) -> Config:
    """Apply what ``load()`` reads now, or keep ``current``; returns the config in force."""
    try:
        new = load()
        skills = parts.build_skills(new)  # a plugin that does not import refuses the reload
    except SetupError as exc:  # ConfigError and PluginError included
        log.error("config reload refused, the running config is kept: %s", exc.message)
        return current
    later = needs_restart(current, new)
    await parts.spend.relimit(new.a2a.caller_limits, parts.data_dir)
    parts.verifier.replace(new.a2a.tokens, anonymous=anonymous_identity(new))
    parts.catalog.configure(skills)
    if isinstance(parts.delegator, PeerDelegator):
        parts.delegator.set_peers(from_config(new.peers))
    log.info("config reloaded from %s", new.source, extra={"kv": {
        "tokens": len(new.a2a.tokens), "peers": len(new.peers), "skills": len(skills)}})
    if later:
        log.warning("config reload: %s changed and take(s) effect at the next restart",
                    ", ".join(later))
    return replace(current, a2a=replace(current.a2a, **{k: getattr(new.a2a, k)
                                                       for k in RELOADED_A2A}),
                   **{k: getattr(new, k) for k in RELOADED})
