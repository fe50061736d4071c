#!/usr/bin/env python3
"""The intent router's evaluation: ``.venv/bin/python bench/intent/runner.py [--half H]``
(or ``bash bench/run --only intent``).

Decides every request of the test half (``--half tuning`` or ``both`` for the others)
with Butler's router and with two baselines (BM25; TF-IDF over character n-grams), each
baseline's decline threshold chosen on the tuning half only; then adds each hostile card
in turn and counts the requests meant for other agents it wins; then times a decision at
the real candidate count, at 50 and at 1,000 (padded with synthetic candidates). Prints
tables and writes bench/results/intent.json. README.md describes the data.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo

from intent import baselines, report, speed
from intent.butler_router import ButlerRouter, all_routes, label, text_of
from intent.dataset import (
    HOSTILE,
    AgentCards,
    Request,
    load_cards,
    load_half,
    load_requests,
)

RESULTS = Path(__file__).resolve().parents[1] / "results" / "intent.json"
SIZES = (50, 1000)  # besides the real candidate count
Decide = Callable[[str], tuple[str | None, list[str]]]


def score(decide: Decide, requests: Sequence[Request]) -> dict[str, Any]:
    """Each request decided once: the rates in %, per category too, and each miss."""
    rows = []
    for r in requests:
        chosen, top = decide(r.text)
        rows.append((r, chosen, top))
    scope = [x for x in rows if not x[0].declines]
    out_ = [x for x in rows if x[0].declines]

    def pct(n: int, d: int) -> float:
        return round(100 * n / d, 1) if d else 0.0

    by_cat: dict[str, list[bool]] = {}
    for r, chosen, _ in rows:
        by_cat.setdefault(r.category, []).append(r.accepts(chosen))
    return {
        "requests": len(rows), "in_scope": len(scope), "out_of_scope": len(out_),
        "top1": pct(sum(bool(t) and r.accepts(t[0]) for r, _, t in scope), len(scope)),
        "top3": pct(sum(any(r.accepts(x) for x in t) for r, _, t in scope), len(scope)),
        "accepted_right": pct(sum(r.accepts(c) for r, c, _ in scope), len(scope)),
        "right_agent": pct(sum(c is not None and c.split("/")[0] == r.agent
                               for r, c, _ in scope), len(scope)),
        "misrouted": pct(sum(c is not None and not r.accepts(c) for r, c, _ in scope),
                         len(scope)),
        "false_declines": pct(sum(c is None for _, c, _ in scope), len(scope)),
        "correct_declines": pct(sum(c is None for _, c, _ in out_), len(out_)),
        "false_accepts": pct(sum(c is not None for _, c, _ in out_), len(out_)),
        "overall": pct(sum(r.accepts(c) for r, c, _ in rows), len(rows)),
        "by_category": {cat: pct(sum(v), len(v)) for cat, v in sorted(by_cat.items())},
        "category_counts": {cat: len(v) for cat, v in sorted(by_cat.items())},
        "misses": [{"id": r.id, "text": r.text[:120], "expect": r.expect, "chosen": c,
                    "top3": t} for r, c, t in rows if not r.accepts(c)],
    }


def tuned(make: Callable[[Sequence[str]], baselines.Scorer], name: str, texts: list[str],
          labels: list[str], tuning: Sequence[Request]) -> baselines.Baseline:
    """A baseline over the candidates, its threshold chosen on ``tuning``."""
    base = baselines.Baseline(name, make(texts), labels)
    tops = []
    for r in tuning:
        top = base.ranked(r.text, 1)
        best, first = (top[0][1], top[0][0]) if top else (0.0, None)
        tops.append((best, not r.declines and r.accepts(first), r.declines))
    base.threshold = baselines.choose_threshold(tops)
    return base


def make_bm25(texts: Sequence[str]) -> baselines.Scorer:
    return baselines.Bm25(texts).scores


def make_tfidf(texts: Sequence[str]) -> baselines.Scorer:
    return baselines.CharTfidf(texts).scores


MAKERS = (("BM25", make_bm25), ("TF-IDF char 3-5", make_tfidf))


def deciders(cards: AgentCards, tuning: Sequence[Request],
             extra_peers: Sequence[tuple[dict[str, Any], dict[str, Any]]] = ()
             ) -> list[tuple[str, Decide, Callable[[], None], float | None]]:
    """(name, decide, close, threshold) for Butler's router and each baseline."""
    routes = all_routes(cards, extra_peers)
    texts = [text_of(c) for c in routes]
    labels = [label(c) for c in routes]
    butler = ButlerRouter(cards, extra_peers)
    out: list[tuple[str, Decide, Callable[[], None], float | None]] = [
        ("Butler", butler.decide, butler.close, None)]
    for name, make in MAKERS:
        base = tuned(make, name, texts, labels, tuning)
        out.append((name, base.decide, lambda: None, round(base.threshold, 4)))
    return out


def hijacks(cards: AgentCards, tuning: Sequence[Request], targets: Sequence[Request],
            test: Sequence[Request]) -> dict[str, Any]:
    """Per hostile card, per router: the requests meant for another agent it wins."""
    meant = [r for r in test if not r.declines]
    out: dict[str, Any] = {}
    for name, entry, card in cards.hostile:
        peer = entry["name"]
        per: dict[str, Any] = {}
        for router, decide, close, _ in deciders(cards, tuning, [(entry, card)]):
            won = {"targets": [r.id for r in targets if _wins(decide, r, peer)],
                   "test": [r.id for r in meant if _wins(decide, r, peer)]}
            per[router] = {"targets_won": len(won["targets"]), "targets": len(targets),
                           "test_won": len(won["test"]), "test": len(meant), "won": won}
            close()
        out[name] = per
    return out


def _wins(decide: Decide, r: Request, peer: str) -> bool:
    chosen, _ = decide(r.text)
    return chosen is not None and chosen.split("/", 1)[0] == peer and r.agent != peer


def _padding(n: int) -> list[Any]:
    """``n`` synthetic candidates, each a skill of a synthetic peer (distinct ids)."""
    return [dataclasses.replace(c, peer=c.peer or f"synthetic{i % 97}", source="registry")
            for i, c in enumerate(speed.cards(n))]


def timing(cards: AgentCards, tuning: Sequence[Request], texts: Sequence[str],
           rounds: int) -> list[dict[str, Any]]:
    """Seconds per decision at the real count, 50 and 1,000 candidates: Butler's whole
    ``choose`` (the daemon's call), and the baselines' scoring and choice. The
    collector runs between decisions, as in the daemon (its pauses count)."""
    real = len(all_routes(cards))
    out = []
    for size in (real, *SIZES):
        pad = _padding(max(size - real, 0))
        butler = ButlerRouter(cards, padding=pad, limit=size)
        point: dict[str, Any] = {"candidates": butler.candidates}
        point["Butler"] = _summary(butler.timed(texts, rounds))
        butler.close()
        routes = [*all_routes(cards), *pad][:size]
        for name, make in MAKERS:
            base = baselines.Baseline(name, make([text_of(c) for c in routes]),
                                      [label(c) for c in routes])
            times = []
            for _ in range(max(rounds // 5, 1)):
                for said in texts:
                    t0, c0 = time.perf_counter(), time.thread_time()
                    base.decide(said)
                    times.append((time.perf_counter() - t0, time.thread_time() - c0))
            point[name] = _summary(times)
        out.append(point)
    return out


def _summary(times: list[tuple[float, float]]) -> dict[str, float]:
    """Median and p99 of the decisions' CPU time (what a decision costs, without the
    time other processes on a shared machine took the CPU), and the wall-clock p99."""
    cpu = sorted(c for _, c in times)
    wall = sorted(w for w, _ in times)

    def p99(xs: list[float]) -> float:
        return round(xs[int(0.99 * (len(xs) - 1))] * 1000, 4)

    return {"median_ms": round(statistics.median(cpu) * 1000, 4), "p99_ms": p99(cpu),
            "wall_median_ms": round(statistics.median(wall) * 1000, 4),
            "wall_p99_ms": p99(wall), "decisions": len(times)}


def run(half: str = "test", rounds: int = 5) -> dict[str, Any]:
    cards = load_cards()
    tuning = load_half("tuning")
    halves = ["tuning", "test"] if half == "both" else [half]
    requests = {h: load_half(h) for h in halves}
    results: dict[str, Any] = {
        "schema": 1, "half": half, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "python": platform.python_version(), "candidates": len(all_routes(cards)),
        "agents": 1 + len(cards.peers), "routers": {}, "thresholds": {}}
    for name, decide, close, threshold in deciders(cards, tuning):
        results["routers"][name] = {h: score(decide, rs) for h, rs in requests.items()}
        if threshold is not None:
            results["thresholds"][name] = threshold
        close()
    test = load_half("test")
    results["hostile"] = hijacks(cards, tuning, load_requests(HOSTILE / "requests.jsonl"), test)
    results["timing"] = timing(cards, tuning, [r.text for r in test], rounds)
    return results


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--half", choices=("test", "tuning", "both"), default="test")
    p.add_argument("--rounds", type=int, default=5, help="timing rounds over the test half")
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--misses", action="store_true", help="list Butler's wrong decisions")
    args = p.parse_args(argv)
    results = run(args.half, args.rounds)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(report.text(results))
    if args.misses:
        for half, s in results["routers"]["Butler"].items():
            for m in s["misses"]:
                print(f"{half} {m['expect']:<32} -> {m['chosen']!s:<32} {m['text']}")
    print(f"\nresults: {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
