#!/usr/bin/env python3
"""The intent router's speed alone: ``.venv/bin/python bench/intent/speed.py [--candidates N]``.

Builds N synthetic cards (names, tags, capabilities, examples and descriptions drawn from
a 3,000-word vocabulary with a Zipf-like skew, so common words are on many cards, as
"search" or "notes" are), indexes them once, then routes a fixed set of 200 tasks of 4
to 16 words (a quarter of their words on no card) over and over. Prints the index build
time and the per-task routing time (median, p90, p99). In-process and single-threaded:
no daemon, no I/O. docs/performance.md records the numbers.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from butler.routing import RouteCandidate, RouteIndex

VOCABULARY = 3000


def _word(n: int) -> str:
    """A pronounceable synthetic word per number: distinct stems, no stop words."""
    syllables = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "do")
    out, n = "", n + 1
    while n:
        n, r = divmod(n, len(syllables))
        out += syllables[r]
    return out + "x"


def _pick(rng: random.Random, words: list[str], weights: list[float], k: int) -> list[str]:
    return rng.choices(words, weights, k=k)


def cards(n: int, seed: int = 7) -> list[RouteCandidate]:
    rng = random.Random(seed)
    words = [_word(i) for i in range(VOCABULARY)]
    weights = [1 / (i + 1) for i in range(VOCABULARY)]
    out = []
    for i in range(n):
        def some(k: int) -> str:
            return " ".join(_pick(rng, words, weights, k))
        out.append(RouteCandidate(
            f"skill.{i}.{_word(i)}", peer="" if i % 3 else f"peer{i % 50}", name=some(3),
            description=some(20), tags=tuple(some(1) for _ in range(4)),
            examples=tuple(some(8) for _ in range(2)), capabilities=(some(2),)))
    return out


def tasks(count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    words = [_word(i) for i in range(VOCABULARY)]
    weights = [1 / (i + 1) for i in range(VOCABULARY)]
    out = []
    for _ in range(count):
        length = rng.randint(4, 16)
        said = [w if rng.random() > 0.25 else f"unknown{rng.randint(0, 10**6)}"
                for w in _pick(rng, words, weights, length)]
        out.append("please could you " + " ".join(said) + "?")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--candidates", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--semantic", action="store_true",
                   help="with the semantic stage (needs the semantic extra)")
    args = p.parse_args()
    candidates = cards(args.candidates)
    started = time.perf_counter()
    index = RouteIndex(candidates, semantic=args.semantic)
    index.route("load the model")  # the semantic stage embeds the candidates on first use
    built = time.perf_counter() - started
    texts = tasks(200)
    for text in texts:  # warm up
        index.route(text)
    times = []
    for _ in range(args.rounds):
        for text in texts:
            t0 = time.perf_counter()
            index.route(text)
            times.append(time.perf_counter() - t0)
    times.sort()

    def at(share: float) -> float:
        return times[int(share * (len(times) - 1))] * 1e6

    print(f"candidates: {len(candidates)}, stages {'+'.join(index.stages)}; "
          f"index built once in {built * 1000:.1f} ms")
    print(f"route one task: median {statistics.median(times) * 1e6:.0f} us, "
          f"p90 {at(0.9):.0f} us, p99 {at(0.99):.0f} us ({len(times)} routes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
