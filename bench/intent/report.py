"""The intent evaluation's results as tables (standard library only: ``bench/run
--render`` shows them without Butler's code)."""

from __future__ import annotations

from typing import Any

ROUTERS = ("Butler", "BM25", "TF-IDF char 3-5")
COLUMNS = (("top1", "top-1"), ("top3", "top-3"), ("accepted_right", "accepted right"),
           ("correct_declines", "correct declines"), ("false_accepts", "false accepts"),
           ("misrouted", "misrouted"), ("overall", "overall"))

Table = tuple[str, list[str], list[list[str]]]


def tables(results: dict[str, Any]) -> list[Table]:
    out: list[Table] = []
    routers = results["routers"]
    for half in next(iter(routers.values())):
        n = routers["Butler"][half]
        title = (f"Intent routing, {half} half: {n['requests']} requests ({n['in_scope']} "
                 f"for a skill, {n['out_of_scope']} to decline), {results['candidates']} "
                 "candidates; % (top-1/top-3/accepted right of those for a skill; "
                 "declines/false accepts of those to decline)")
        rows = [[name, *(f"{routers[name][half][k]:.1f}" for k, _ in COLUMNS)]
                for name in ROUTERS if name in routers]
        out.append((title, ["router", *(h for _, h in COLUMNS)], rows))
        cats = list(routers["Butler"][half]["by_category"])
        counts = routers["Butler"][half]["category_counts"]
        out.append((f"Overall % by category, {half} half",
                    ["category", "n", *(r for r in ROUTERS if r in routers)],
                    [[c, str(counts[c]), *(f"{routers[r][half]['by_category'][c]:.1f}"
                                           for r in ROUTERS if r in routers)] for c in cats]))
    rows = []
    for card, per in results["hostile"].items():
        rows.append([card, *(f"{per[r]['targets_won']}/{per[r]['targets']}, "
                             f"{per[r]['test_won']}/{per[r]['test']}" for r in ROUTERS)])
    out.append(("Hostile cards: requests meant for another agent the card wins "
                "(of hostile/requests.jsonl, of the test half's)", ["card", *ROUTERS], rows))
    rows = [[str(p["candidates"]), *(f"{p[r]['median_ms']:.3f} / {p[r]['p99_ms']:.3f} "
                                     f"({p[r]['wall_p99_ms']:.3f})" for r in ROUTERS)]
            for p in results["timing"]]
    out.append(("Decision time per request, ms: CPU median / CPU p99 (wall-clock p99)",
                ["candidates", *ROUTERS], rows))
    return out


def text(results: dict[str, Any]) -> str:
    lines = []
    for title, header, rows in tables(results):
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
        lines += ["", title, "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
                  for row in rows]
    thresholds = ", ".join(f"{k} {v:g}" for k, v in results["thresholds"].items())
    lines.append(f"\nbaseline thresholds (chosen on the tuning half): {thresholds}")
    return "\n".join(lines)


# Issue 35's targets on the test half (reported, never asserted).
OVERALL_PCT = 85.0
OVER_BEST_BASELINE_POINTS = 15.0
FALSE_ACCEPTS_PCT = 15.0
P99_MS = {50: 0.5, 1000: 2.0}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 35's targets for the router, from an evaluation's results."""
    test = {name: halves["test"] for name, halves in results.get("routers", {}).items()
            if "test" in halves}
    out: list[dict[str, Any]] = []
    butler = test.get("Butler")
    if butler is not None:
        best = max((s["overall"] for name, s in test.items() if name != "Butler"), default=0.0)
        out += [
            {"name": "intent: overall, test half", "goal": f">= {OVERALL_PCT:g} %",
             "measured": f"{butler['overall']:.1f} %", "met": butler["overall"] >= OVERALL_PCT},
            {"name": "intent: overall above the best baseline", "goal":
             f">= +{OVER_BEST_BASELINE_POINTS:g} points",
             "measured": f"{butler['overall'] - best:+.1f} points",
             "met": butler["overall"] - best >= OVER_BEST_BASELINE_POINTS},
            {"name": "intent: false accepts of out-of-scope requests",
             "goal": f"<= {FALSE_ACCEPTS_PCT:g} %", "measured": f"{butler['false_accepts']:.1f} %",
             "met": butler["false_accepts"] <= FALSE_ACCEPTS_PCT}]
    hostile = results.get("hostile", {})
    if hostile:
        won = sum(per["Butler"]["targets_won"] + per["Butler"]["test_won"]
                  for per in hostile.values())
        out.append({"name": "intent: requests a hostile card wins", "goal": "0",
                    "measured": str(won), "met": won == 0})
    for point in results.get("timing", ()):  # CPU time: wall-clock p99 on a busy machine
        # is the other processes' (both are in the results)
        goal = P99_MS.get(point["candidates"])
        if goal is not None:
            p99 = point["Butler"]["p99_ms"]
            out.append({"name": f"intent: decision p99 (CPU) at {point['candidates']} "
                        "candidates",
                        "goal": f"<= {goal:g} ms", "measured": f"{p99:.3f} ms",
                        "met": p99 <= goal})
    return out
