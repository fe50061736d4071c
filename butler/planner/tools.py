"""What the planner's model may call: the local skills the caller may see and the peers it
may delegate to (``a2a_delegate``), as OpenAI function tools.

The tools are the intent router's candidates (the same visibility and grants), so a plan
reaches nothing the caller could not have asked for by name. Function names are limited
to ``[A-Za-z0-9_-]{1,64}`` on the wire (OpenAI's rule), so ``memory.search`` is offered as
``memory_search``; each name maps back to exactly one tool.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from butler.planner.wire import ToolCall, bad
from butler.routing import RouteCandidate
from butler.skills.catalog import Skill

DELEGATE_TOOL = "a2a_delegate"
# OpenAI's limit of tools per request: the skills beyond it are not offered.
MAX_TOOLS = 128
# Peers named in a2a_delegate (configured peers come first, then a registry's agents):
# each costs prompt tokens, and so reserved budget, on every model call.
MAX_PEERS = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_TEXT = {"type": "string", "description": "what to ask, in plain words"}


@dataclass(frozen=True, slots=True)
class LocalTool:
    skill: Skill


@dataclass(frozen=True, slots=True)
class DelegateTool:
    peers: tuple[str, ...]
    # (peer, skill id) the caller may reach; (peer, "") for a peer as a whole.
    offers: frozenset[tuple[str, str]] = frozenset()

    def allows(self, peer: str, skill: str | None) -> bool:
        """Whether the caller may reach ``peer`` (and its ``skill``): the model's arguments
        are its words, not a grant, so what it names must be what it was offered."""
        if peer not in self.peers:
            return False
        return skill is None or (peer, skill) in self.offers or (peer, "") in self.offers


@dataclass(frozen=True, slots=True)
class Step:
    """One tool call, read: what runs and with what."""

    call: ToolCall
    tool: LocalTool | DelegateTool
    text: str
    input: dict[str, Any]
    peer: str = ""
    skill: str | None = None  # the peer's skill, when the model named one

    @property
    def label(self) -> str:
        if isinstance(self.tool, LocalTool):
            return self.tool.skill.id
        return f"{self.peer}/{self.skill}" if self.skill else self.peer


class Toolbox:
    def __init__(self, skills: list[Skill], peers: list[RouteCandidate]) -> None:
        self._tools: dict[str, LocalTool | DelegateTool] = {}
        self.specs: list[dict[str, Any]] = []
        for skill in skills[:MAX_TOOLS - 1]:
            name = self._name(skill.id)
            self._tools[name] = LocalTool(skill)
            self.specs.append(_function(name, _describe_skill(skill), _skill_parameters(skill)))
        names = tuple(dict.fromkeys(c.peer for c in peers))[:MAX_PEERS]
        peers = [c for c in peers if c.peer in names]
        if names:
            self._tools[DELEGATE_TOOL] = DelegateTool(
                names, frozenset((c.peer, c.skill_id) for c in peers))
            self.specs.append(_function(DELEGATE_TOOL, _describe_peers(peers), {
                "type": "object",
                "properties": {"peer": {"type": "string", "enum": list(names)},
                               "skill": {"type": "string",
                                         "description": "one of the peer's skills (optional)"},
                               "task": _TEXT},
                "required": ["peer", "task"]}))

    def _name(self, skill_id: str) -> str:
        base = _UNSAFE.sub("_", skill_id)[:60]
        name, n = base, 1
        while name in self._tools or name == DELEGATE_TOOL:
            n += 1
            name = f"{base[:56]}_{n}"
        return name

    def read(self, call: ToolCall) -> Step:
        """The call as a step; ``planner_bad_response`` for an unknown tool or arguments
        that are not a JSON object of the right shape."""
        tool = self._tools.get(call.name)
        if tool is None:
            raise bad(f"the model called {call.name!r}, which is not one of its tools")
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError:
            raise bad(f"the arguments of the model's call to {call.name!r} are not JSON") \
                from None
        if not isinstance(args, dict):
            raise bad(f"the arguments of the model's call to {call.name!r} are not an object")
        if isinstance(tool, LocalTool):
            text, data = args.get("text", ""), args.get("input", {})
            if not isinstance(text, str) or not isinstance(data, dict):
                raise bad(f"{call.name!r} takes text (a string) and input (an object)")
            return Step(call, tool, text, data)
        peer, task, skill = args.get("peer"), args.get("task"), args.get("skill")
        if not isinstance(peer, str) or not isinstance(task, str) \
                or not isinstance(skill, str | None):
            raise bad(f"{DELEGATE_TOOL} takes peer and task (strings) and skill (optional)")
        return Step(call, tool, task, {}, peer=peer, skill=skill or None)


def _function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function",
            "function": {"name": name, "description": description, "parameters": parameters}}


def _describe_skill(skill: Skill) -> str:
    cfg = skill.config
    said = _card(cfg.name, cfg.description, cfg.tags, cfg.examples)[2:] or cfg.id
    extra = f" (costs {cfg.cost_usd} USD)" if cfg.cost_usd else ""
    return f"{said}{extra}"[:1000]


def _skill_parameters(skill: Skill) -> dict[str, Any]:
    schema = skill.config.input_schema or {"type": "object"}
    return {"type": "object", "properties": {"text": _TEXT, "input": schema}}


def _describe_peers(peers: list[RouteCandidate]) -> str:
    lines = ["Delegate a task to another agent. Agents and what they offer:"]
    for cand in peers[:4 * MAX_PEERS]:
        what = cand.skill_id or ", ".join(cand.capabilities) or "anything"
        card = _card(cand.name, cand.description, cand.tags, cand.examples)
        lines.append(f"- {cand.peer} / {what}{card}")
    return "\n".join(lines)


def _card(name: str, description: str, tags: tuple[str, ...],
          examples: tuple[str, ...]) -> str:
    """A skill as its card shows it, bounded: name, description, tags, two examples."""
    said = [t for t in (name[:80], description[:160]) if t]
    if tags:
        said.append("tags: " + ", ".join(t[:40] for t in tags[:8]))
    if examples:
        said.append("e.g. " + "; ".join(f'"{e[:100]}"' for e in examples[:2]))
    return (": " + ". ".join(said)) if said else ""
