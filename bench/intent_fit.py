"""Refit the intent router's calibration (butler/routing/calibration.py) on the
evaluation's tuning half, and report how the router does on it.

    PYTHONPATH=. python bench/intent_fit.py [--data bench/intent] [--semantic on|off|both]

Reads ``DATA/cards`` (``home.yaml``: the user's own skills; ``*.json``: a peer entry and
its agent card each) and ``DATA/tuning.jsonl`` (``text``, ``expect``: ``agent/skill``,
``agent`` for a peer as a whole, or ``decline``). Never reads the test half. For each
stage set it fits the logistic regression of "the top candidate is right" on (fused,
margin, known), prints the constants to paste into calibration.py, and the threshold
that maximises overall accuracy with false accepts of out-of-scope requests <= 15 %.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from butler.delegation.peer_cards import from_card
from butler.delegation.peers import Candidate
from butler.routing import RouteCandidate, RouteIndex, fusion
from butler.routing.calibration import COEFFICIENTS, DEFAULT_THRESHOLD
from butler.routing.fusion import prior
from butler.routing.words import words

MAX_FALSE_ACCEPTS = 0.15


def load_cards(cards: Path) -> tuple[str, list[RouteCandidate]]:
    """The own agent's id and every candidate, as the daemon would build them."""
    home = yaml.safe_load((cards / "home.yaml").read_text())
    own = home["agent"]["id"]
    out = [RouteCandidate(s["id"], name=s.get("name", ""), description=s.get("description", ""),
                          tags=tuple(s.get("tags", ())), examples=tuple(s.get("examples", ())),
                          capabilities=tuple(s.get("capabilities", ()) or (s["id"],)))
           for s in home["skills"]]
    for path in sorted(cards.glob("*.json")):
        entry = json.loads(path.read_text())
        p = entry["peer"]
        peer = Candidate(p["name"], p["url"], "", tuple(p.get("capabilities", ())),
                         Decimal(str(p.get("cost_usd", "0"))),
                         source="registry" if p.get("source") == "registry" else "static",
                         protocol=p.get("protocol", "butler"))
        out += from_card(peer, entry["card"])
    return own, out


def label(own: str, c: RouteCandidate) -> str:
    if not c.peer:
        return f"{own}/{c.skill_id}"
    return f"{c.peer}/{c.skill_id}" if c.skill_id else c.peer


@dataclass
class Row:
    expect: str
    category: str
    top: str | None
    top3: list[str]
    features: tuple[float, float, float]


def rows(index: RouteIndex, own: str, data: list[dict[str, Any]]) -> list[Row]:
    out = []
    for r in data:
        ranking = index.route(r["text"], threshold=0.0, ignore=frozenset(words(own)))
        ranked = ranking.ranked
        if not ranked:
            out.append(Row(r["expect"], r["category"], None, [], (0.0, 0.0, 0.0)))
            continue
        f = [s.fused for s in ranked]
        out.append(Row(r["expect"], r["category"], label(own, ranked[0].candidate),
                       [label(own, s.candidate) for s in ranked[:3]],
                       (f[0], f[0] - (f[1] if len(f) > 1 else 0.0), ranking.known)))
    return out


def logistic(xs: list[tuple[float, ...]], ys: list[float], steps: int = 3000,
             rate: float = 1.0) -> tuple[float, ...]:
    """Logistic regression by gradient descent (a handful of numbers: no library needed).
    Each x starts with its constant 1."""
    w = [0.0] * len(xs[0])
    for _ in range(steps):
        grad = [0.0] * len(w)
        for x, y in zip(xs, ys, strict=True):
            z = sum(a * b for a, b in zip(w, x, strict=True))
            p = 1 / (1 + math.exp(-max(-50.0, min(50.0, z))))
            for k, xk in enumerate(x):
                grad[k] += (p - y) * xk
        w = [a - rate * g / len(xs) for a, g in zip(w, grad, strict=True)]
    return tuple(round(a, 3) for a in w)


def fit(data: list[Row]) -> tuple[float, ...]:
    """The calibration: P(the top candidate is right | fused, margin, known)."""
    xs = [(1.0, *r.features) for r in data if r.top is not None]
    ys = [1.0 if r.top == r.expect else 0.0 for r in data if r.top is not None]
    return logistic(xs, ys)


def fit_fusion(index: RouteIndex, own: str, data: list[dict[str, Any]]
               ) -> dict[str, float]:
    """The fusion weights: a logistic regression of "this candidate is the right one" on
    each candidate's stage shares (times its prior) and whether the task names its peer,
    over the requests some candidate should take; scaled so the stage weights sum to 1."""
    ignore = frozenset(words(own))
    priors = [prior(c) for c in index.candidates]
    labels = [label(own, c) for c in index.candidates]
    xs: list[tuple[float, ...]] = []
    ys: list[float] = []
    names: list[str] = []
    for r in data:
        if r["expect"] == "decline":
            continue
        ev = index.evidence(r["text"], ignore)
        if not ev.stems:
            continue
        names = list(ev.shares)
        for i, p in enumerate(priors):
            xs.append((1.0, *(p * ev.shares[s][i] for s in names), float(ev.named[i])))
            ys.append(1.0 if labels[i] == r["expect"] else 0.0)
    w = logistic(xs, ys)
    total = sum(max(0.0, v) for v in w[1:-1]) or 1.0
    out = {s: round(max(0.0, v) / total, 3) for s, v in zip(names, w[1:-1], strict=True)}
    out["named"] = round(w[-1] / total, 3)
    return out


def prob(w: tuple[float, ...], f: tuple[float, float, float]) -> float:
    z = w[0] + w[1] * f[0] + w[2] * f[1] + w[3] * f[2]
    return 1 / (1 + math.exp(-max(-50.0, min(50.0, z))))


def score(data: list[Row], w: tuple[float, ...], threshold: float) -> dict[str, float]:
    right = declines_ok = false_accepts = oos = inscope = top1 = top3 = 0
    for r in data:
        accept = r.top is not None and prob(w, r.features) >= threshold
        if r.expect == "decline":
            oos += 1
            declines_ok += not accept
            false_accepts += accept
            right += not accept
        else:
            inscope += 1
            top1 += r.top == r.expect
            top3 += r.expect in r.top3
            right += accept and r.top == r.expect
    return {"overall": right / len(data), "top1": top1 / max(1, inscope),
            "top3": top3 / max(1, inscope), "correct_declines": declines_ok / max(1, oos),
            "false_accepts": false_accepts / max(1, oos)}


def best_threshold(data: list[Row], w: tuple[float, ...]) -> tuple[float, dict[str, float]]:
    found: tuple[float, dict[str, float]] | None = None
    for t in (x / 100 for x in range(5, 96)):
        s = score(data, w, t)
        if s["false_accepts"] <= MAX_FALSE_ACCEPTS and (
                found is None or s["overall"] > found[1]["overall"]):
            found = (t, s)
    return found or (0.95, score(data, w, 0.95))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("bench/intent"))
    ap.add_argument("--semantic", choices=("on", "off", "both"), default="both")
    ap.add_argument("--use-fitted", action="store_true",
                    help="route with the fitted fusion weights before fitting the calibration")
    ap.add_argument("--errors", action="store_true", help="list the requests it gets wrong")
    args = ap.parse_args()
    own, cands = load_cards(args.data / "cards")
    data = [json.loads(line) for line in (args.data / "tuning.jsonl").read_text().splitlines()
            if line.strip()]
    for sem in ((True, False) if args.semantic == "both" else (args.semantic == "on",)):
        index = RouteIndex(cands, semantic=sem)
        weights = fit_fusion(index, own, data)
        print(f"fusion weights fitted: {weights} (in code: {fusion.STAGE_WEIGHTS}, "
              f"named {fusion.NAMED_BONUS})")
        if args.use_fitted:
            fusion.NAMED_BONUS = weights.pop("named")
            fusion.STAGE_WEIGHTS.update(weights)
        t0 = time.perf_counter()
        got = rows(index, own, data)
        per = (time.perf_counter() - t0) / len(data) * 1000
        stages = frozenset(index.stages)
        w = fit(got)
        t, s = best_threshold(got, w)
        cur = COEFFICIENTS[stages]
        print(f"stages {sorted(stages)}: {len(cands)} candidates, {len(data)} requests, "
              f"{per:.2f} ms each")
        print(f"  fitted {w}, threshold {t:.2f}: "
              + ", ".join(f"{k} {v:.1%}" for k, v in s.items()))
        print(f"  in code {cur}, threshold {DEFAULT_THRESHOLD}: " + ", ".join(
            f"{k} {v:.1%}" for k, v in score(got, cur, DEFAULT_THRESHOLD).items()))
        if args.errors:
            for r, d in zip(got, data, strict=True):
                accept = r.top is not None and prob(w, r.features) >= t
                ok = (not accept) if r.expect == "decline" else (accept and r.top == r.expect)
                if not ok:
                    print(f"    [{r.category}] {d['text'][:70]!r} want {r.expect} got {r.top} "
                          f"p={prob(w, r.features):.2f} f={tuple(round(x, 2) for x in r.features)}")


if __name__ == "__main__":
    main()
