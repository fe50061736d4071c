"""``butler route``: which skill or peer a task in plain words would go to, and why."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from opentelemetry.trace import NoOpTracer

from butler.cli.serve import load_or_exit
from butler.config.model import Config
from butler.delegation.delegator import PeerDelegator
from butler.delegation.peer_cards import from_card
from butler.delegation.peers import from_config
from butler.delegation.registry_link import RegistryLink
from butler.routing import Ranking, RouteCandidate, RouteIndex, explain
from butler.routing.words import words
from butler.skills.catalog import is_reserved
from butler.swarm.decision import local_candidate


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "route", help="show which skill or peer a task in plain words would go to",
        description="Ranks this instance's exposed skills and its configured peers for TASK "
                    "with the intent router, as a task naming neither a skill nor "
                    "capabilities is routed. Offline by default: peers by their config "
                    "entries; --cards also reads each peer's agent card and, with a "
                    "registry configured, lists its agents. Exits 0 when a "
                    "candidate reaches the threshold, 1 when the task would be refused.")
    p.add_argument("task")
    p.add_argument("--explain", action="store_true",
                   help="show the stages that ran, each stage's score per candidate, which "
                        "words matched which fields, and the priors and caps applied")
    p.add_argument("--json", action="store_true",
                   help="print the ranking as one JSON object (the fields of --explain)")
    p.add_argument("--cards", action="store_true",
                   help="read the peers' agent cards (with their tokens) and the "
                        "registry's agents, as the daemon does")
    p.add_argument("--tier", help="rank what a caller of this tier sees (default: untiered "
                                  "skills only)")
    p.add_argument("-c", "--config", default=os.environ.get("BUTLER_CONFIG"))
    p.set_defaults(handler=_route)


def _route(args: argparse.Namespace) -> int:
    # Offline, no peer is called: their tokens' variables need not be set.
    config = load_or_exit(args.config, secrets=args.cards)
    if config is None:
        return 2
    ranking = asyncio.run(rank(config, args.task, cards=args.cards, tier=args.tier))
    if args.json:
        print(json.dumps(ranking.as_json(), indent=2))
    elif args.explain:
        print(explain(ranking))
    else:
        for n, s in enumerate(ranking.ranked, 1):
            print(f"{n}. {s.candidate.label}  {s.score:.2f}")
        print(explain(ranking).splitlines()[-1])
    sys.stdout.flush()
    return 0 if ranking.best is not None else 1


async def rank(config: Config, text: str, *, cards: bool, tier: str | None = None) -> Ranking:
    """``text`` ranked over ``config``'s exposed skills (those a caller of ``tier`` sees)
    and its peers: by their entries, or with ``cards`` by their agent cards too. An
    ``mcp`` entry is not a skill: its tools are known only once its server runs."""
    local = [local_candidate(s) for s in config.skills
             if s.expose and not is_reserved(s.id) and s.mcp is None
             and (s.tier is None or tier in (s.tier, "admin"))]
    peers = await _cards(config, text) if cards else tuple(
        c for p in from_config(config.peers) for c in from_card(p, {}))
    index = RouteIndex([*local, *peers], semantic=config.swarm.routing_semantic)
    return index.route(text, config.swarm.routing_threshold,
                       ignore=frozenset(words(config.agent.id)))


async def _cards(config: Config, text: str) -> tuple[RouteCandidate, ...]:
    """As the daemon knows them: the peers' cards, and the registry's agents and what
    its search finds for ``text`` if one is configured (never announcing this instance
    there)."""
    link = RegistryLink(config, dict, str)
    delegator = PeerDelegator(agent_id=config.agent.id, static=from_config(config.peers),
                              tracer=NoOpTracer(), audit=lambda *a, **k: None,
                              max_concurrency=8, discover=link.discovery)
    try:
        return await delegator.route_candidates(text)
    finally:
        await delegator.aclose()
        await link.close()
