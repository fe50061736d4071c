"""The intent router's decision time: p50 and p99 of ``RouteIndex.route`` over the
evaluation's card set grown to N candidates (copies of its skills under other peer
names, so the vocabulary grows as it would), with and without the semantic stage.

    PYTHONPATH=. python bench/intent_speed.py [--data bench/intent] [--sizes 50,1000]

The requests are the tuning half's; the index is built and the model loaded before the
clock starts (the daemon does both once per set of cards).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from bench.intent_fit import load_cards
from butler.routing import RouteCandidate, RouteIndex
from butler.routing.words import words


def grow(cands: list[RouteCandidate], n: int) -> list[RouteCandidate]:
    out = list(cands)
    k = 0
    while len(out) < n:
        k += 1
        out += [replace(c, peer=f"{c.peer or 'local'}{k}", source="registry",
                        description=f"{c.description} (mirror {k})") for c in cands]
    return out[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("bench/intent"))
    ap.add_argument("--sizes", default="50,1000")
    args = ap.parse_args()
    own, cands = load_cards(args.data / "cards")
    texts = [json.loads(line)["text"] for line in
             (args.data / "tuning.jsonl").read_text().splitlines() if line.strip()]
    ignore = frozenset(words(own))
    for n in (int(s) for s in args.sizes.split(",")):
        for semantic in (False, True):
            index = RouteIndex(grow(cands, n), semantic=semantic)
            index.route("warm up the model", ignore=ignore)
            times = []
            for _ in range(3):
                for text in texts:
                    t0 = time.perf_counter()
                    index.route(text, ignore=ignore)
                    times.append(time.perf_counter() - t0)
            times.sort()
            p99 = times[int(len(times) * 0.99)]
            print(f"{n} candidates, stages {'+'.join(index.stages)}: "
                  f"p50 {statistics.median(times) * 1000:.3f} ms, p99 {p99 * 1000:.3f} ms")


if __name__ == "__main__":
    main()
