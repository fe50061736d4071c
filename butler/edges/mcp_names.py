"""The MCP tool name of each skill (docs/mcp.md#tool-names).

MCP hosts hand tool names to LLM function-calling APIs, whose rule is
``^[a-zA-Z0-9_-]{1,64}$``; a skill id may hold ``.`` and ``:`` and run to 128 characters.
One mapping, so every host sees the same names: an id that is a valid name is its own;
any other has each character outside the rule replaced by ``_``; a name that is then
longer than 64, or that more than one id would get, or that a valid id (or a tool of the
edge's own) already is, becomes its first 55 characters, ``-`` and the first 8 hex
digits of the id's SHA-256. The names depend on the set of ids alone, never on their
order, so they are the same for every caller and every start.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Collection, Iterable

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_OUTSIDE = re.compile(r"[^A-Za-z0-9_-]")
_KEEP = 55


def tool_names(skill_ids: Iterable[str], reserved: Collection[str] = ()) -> dict[str, str]:
    """Skill id -> tool name, for every id (``reserved``: names of other tools)."""
    ids = set(skill_ids)
    valid = {i for i in ids if TOOL_NAME.fullmatch(i)}
    plain = {i: _OUTSIDE.sub("_", i) for i in ids - valid}
    counts = Counter(plain.values())
    taken = valid | set(reserved)
    names = {i: i for i in valid}
    for skill_id, name in plain.items():
        if len(name) > 64 or counts[name] > 1 or name in taken:
            digest = hashlib.sha256(skill_id.encode()).hexdigest()[:8]
            name = f"{name[:_KEEP]}-{digest}"
        names[skill_id] = name
    return names
