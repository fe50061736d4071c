"""The intent evaluation's data: agents' cards, labelled requests, the tuning/test split.

``python3 bench/intent/dataset.py`` checks the files (every label names a skill on a card,
every request sits in the half its hash puts it in, no text twice) and prints the counts
per category. Standard library and PyYAML only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
CARDS = HERE / "cards"
HOSTILE = HERE / "hostile"
HALVES = ("tuning", "test")
DECLINE = "decline"
NAMES_PEER = "names_peer"
LOCAL_AGENT = "home"  # the user's own Butler: its skills are local candidates
# The split's salt: changing it reshuffles the halves (never do it after a router was
# tuned on one of them).
_SALT = "intent-split-v1\n"


@dataclass(frozen=True, slots=True)
class Request:
    id: str
    text: str
    expect: str  # "agent/skill", "agent" (the peer as a whole, any of its skills) or "decline"
    category: str
    lang: str = "en"

    @property
    def declines(self) -> bool:
        return self.expect == DECLINE

    @property
    def agent(self) -> str:
        return "" if self.declines else self.expect.split("/", 1)[0]

    def accepts(self, label: str | None) -> bool:
        """Whether choosing ``label`` (None: declining) is right for this request. A
        request that names its agent ("ask my office ...") may also go to that agent as
        a whole, which routes it on by itself."""
        if self.declines:
            return label is None
        return right(self.expect, label) or (self.category == NAMES_PEER
                                             and label == self.agent)


@dataclass(frozen=True, slots=True)
class AgentCards:
    """Where each agent's skills come from: ``local`` (Butler's ``skills:`` config, the
    user's own instance), or a peer entry (``peer``, as in a config file or a registry
    record) with the agent card it serves (``card``)."""

    local: tuple[dict[str, Any], ...]
    peers: tuple[tuple[dict[str, Any], dict[str, Any]], ...]  # (peer entry, card)
    hostile: tuple[tuple[str, dict[str, Any], dict[str, Any]], ...] = field(default=())

    def labels(self) -> set[str]:
        """Every target a request may expect."""
        out = {LOCAL_AGENT} | {f"{LOCAL_AGENT}/{s['id']}" for s in self.local}
        for entry, card in self.peers:
            out.add(entry["name"])
            out |= {f"{entry['name']}/{s['id']}" for s in card.get("skills", ())}
        return out


def right(expect: str, label: str | None) -> bool:
    """``label`` is the expected skill, or of the expected agent when only that is asked."""
    if label is None:
        return False
    return label == expect if "/" in expect else label.split("/", 1)[0] == expect


def split_of(text: str) -> str:
    """The half a request belongs to: a hash of its text, so adding a request never
    moves another."""
    digest = hashlib.sha256((_SALT + text).encode()).hexdigest()
    return HALVES[int(digest[:8], 16) % 2]


def request_id(text: str) -> str:
    return hashlib.sha256((_SALT + text).encode()).hexdigest()[:10]


def load_requests(path: Path) -> list[Request]:
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out.append(Request(row["id"], row["text"], row["expect"], row["category"],
                               row.get("lang", "en")))
        except (ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"{path}:{n}: not a request row ({exc})") from None
    return out


def load_half(half: str) -> list[Request]:
    return load_requests(HERE / f"{half}.jsonl")


def load_cards() -> AgentCards:
    local = yaml.safe_load((CARDS / f"{LOCAL_AGENT}.yaml").read_text(encoding="utf-8"))
    peers = []
    for path in sorted(CARDS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        peers.append((data["peer"], data["card"]))
    hostile = []
    for path in sorted(HOSTILE.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        hostile.append((path.stem, data["peer"], data["card"]))
    return AgentCards(tuple(local["skills"]), tuple(peers), tuple(hostile))


def problems(cards: AgentCards, halves: dict[str, list[Request]]) -> list[str]:
    """What is wrong with the data, one line per problem (none: an empty list)."""
    labels = cards.labels() | {DECLINE}
    seen: dict[str, str] = {}
    out = []
    for half, requests in halves.items():
        for r in requests:
            where = f"{half}.jsonl {r.id}"
            if r.expect not in labels:
                out.append(f"{where}: {r.expect!r} is on no card")
            if half in HALVES and split_of(r.text) != half:
                out.append(f"{where}: belongs in {split_of(r.text)}.jsonl")
            if half in HALVES and r.id != request_id(r.text):
                out.append(f"{where}: id should be {request_id(r.text)}")
            key = " ".join(r.text.lower().split())
            if key in seen:
                out.append(f"{where}: same text as {seen[key]}")
            seen[key] = where
    return out


def main() -> int:
    cards = load_cards()
    halves = {h: load_half(h) for h in HALVES}
    halves["hostile"] = load_requests(HOSTILE / "requests.jsonl")
    found = problems(cards, halves)
    for line in found:
        print(line, file=sys.stderr)
    skills = len(cards.local) + sum(len(c.get("skills", ())) for _, c in cards.peers)
    print(f"agents: {1 + len(cards.peers)}; skills: {skills}; hostile cards: "
          f"{len(cards.hostile)}")
    counts = {h: Counter(r.category for r in halves[h]) for h in HALVES}
    print(f"{'category':<24}{'tuning':>8}{'test':>8}{'all':>8}")
    for cat in sorted(set(counts["tuning"]) | set(counts["test"])):
        t, s = counts["tuning"][cat], counts["test"][cat]
        print(f"{cat:<24}{t:>8}{s:>8}{t + s:>8}")
    both = [r for h in HALVES for r in halves[h]]
    print(f"{'all':<24}{len(halves['tuning']):>8}{len(halves['test']):>8}{len(both):>8}")
    print(f"declines: {sum(r.declines for r in both)}; non-English: "
          f"{sum(r.lang != 'en' for r in both)}; hostile-target requests: "
          f"{len(halves['hostile'])}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
