#!/usr/bin/env python3
"""Butler's benchmark, one command: ``python3 bench/run.py [--quick] [--update-docs]``.

Installs what it needs (see harness/bootstrap.py), then measures, in this order:
inbound task throughput/latency against the a2a-sdk reference (with memory), per-hop
overhead of delegation chains, the registry on SQLite and Redis, a py-spy profile, and
the intent router on bench/intent's labelled requests (in-process: ``--only intent``
needs no servers and writes bench/results/intent.json). Prints a table, writes
bench/results/latest.json (--quick: quick.json). The method and the latest numbers are
in docs/performance.md; the intent evaluation is described in bench/intent/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import bootstrap  # stdlib only: it runs before the venv exists

SCENARIOS = ("inbound", "hops", "registry", "profile", "intent")
# Scenarios that run in-process, without servers, wrk or Debian packages.
IN_PROCESS = {"intent"}
DOC = bootstrap.REPO / "docs" / "performance.md"
DOC_START, DOC_END = "<!-- bench:results:start -->", "<!-- bench:results:end -->"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="a ~1-minute smoke run: short runs, registry up to 10k agents")
    p.add_argument("--seconds", type=float, help="measured seconds per load point")
    p.add_argument("--warmup", type=float, help="warm-up seconds before each load point")
    p.add_argument("--connections", default="1,16,64", help="inbound connection counts")
    p.add_argument("--hops", type=int, default=4, help="longest delegation chain")
    p.add_argument("--scales", help="registry sizes, e.g. 1000,10000,100000")
    p.add_argument("--only", default=",".join(SCENARIOS),
                   help=f"scenarios to run, comma-separated: {', '.join(SCENARIOS)}")
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                   help="on a shared machine, wait before each load point until other "
                   "processes use < 10%% CPU, for at most SECONDS over the whole run")
    p.add_argument("--output", type=Path, help="JSON results file")
    p.add_argument("--update-docs", action="store_true",
                   help="rewrite the results section of docs/performance.md")
    p.add_argument("--render", type=Path, metavar="JSON",
                   help="measure nothing: print (and with --update-docs, write) the tables "
                   "of an earlier results file")
    p.add_argument("--no-install", action="store_true",
                   help="use the environment as it is (no apt-get, no venv)")
    args = p.parse_args(argv)
    args.only = [s for s in args.only.split(",") if s]
    unknown = set(args.only) - set(SCENARIOS)
    if unknown:
        p.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    quick = args.quick
    args.seconds = args.seconds or (2.0 if quick else 8.0)
    args.warmup = args.warmup if args.warmup is not None else (0.0 if quick else 2.0)
    args.connections = [int(c) for c in args.connections.split(",")]
    args.scales = ([int(s) for s in args.scales.split(",")] if args.scales
                   else [1000, 10000] if quick else [1000, 10000, 100_000, 1_000_000])
    results_dir = bootstrap.BENCH / "results"
    default = ("intent.json" if set(args.only) <= IN_PROCESS
               else "quick.json" if quick else "latest.json")
    args.output = args.output or results_dir / default
    return args


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from harness import hops, inbound, machine, noise, profile, registry, speed, targets
    from harness.procs import Cpus

    cpus = Cpus.detect()
    if cpus.load is not None:  # the orchestrator stays off the server's CPU too
        os.sched_setaffinity(0, {int(c) for c in cpus.load.split(",")})
    info = machine.describe(cpus)
    noise.PATIENCE.seconds, noise.PATIENCE.cpu = args.wait_quiet, cpus.server
    info["busy_before_start_pct"] = noise.busy_now(1.0, cpus.server)
    say(machine.one_line(info))
    if info["busy_before_start_pct"] > noise.NOISY_PCT:
        say(f"note: other processes keep {info['busy_before_start_pct']:.0f} % of the server's "
            "CPU busy; the numbers will be low and noisy (see noise_cpu_pct per load point)")
    results: dict[str, Any] = {
        "schema": 1, "mode": "quick" if args.quick else "full", "machine": info,
        "settings": {"seconds": args.seconds, "warmup": args.warmup,
                     "wait_quiet": args.wait_quiet,
                     "connections": args.connections, "hops": args.hops,
                     "registry_scales": args.scales, "scenarios": args.only},
    }
    began = time.monotonic()
    secs, warm, levels = args.seconds, args.warmup, args.connections
    speeds: dict[str, Any] = {}
    results["cpu_speed"] = speeds

    def check_speed(when: str) -> None:
        speeds[when] = speed.sample(cpus.server)
        say(speed.one_line(speeds[when]))

    if "inbound" in args.only:
        check_speed("before inbound")
        say("inbound: Butler (/v2/tasks, then A2A SendMessage: JSON-RPC, HTTP+JSON)")
        res = inbound.run_butler(work / "butler", cpus, levels, secs, warm)
        for kind, what in (("js", "@a2a-js/sdk, in-memory task store (its default)"),
                           ("memory", "a2a-sdk, in-memory task store (its default)"),
                           ("sqlite", "a2a-sdk, SQLite task store (durable)")):
            say(f"inbound: {what}")
            res[f"reference_{kind}"] = inbound.run_reference(work / "ref", cpus, levels,
                                                             secs, warm, kind)
        res["ratios"] = inbound.all_ratios(res)
        results["inbound"] = res
    if "hops" in args.only:
        check_speed("before hops")
        say(f"per-hop: chains of 1..{args.hops} instances, 1 connection")
        results["hops"] = hops.run(work / "hops", cpus, args.hops, max(secs * 0.75, 2), warm)
    if "registry" in args.only:
        check_speed("before registry")
        say(f"registry: {', '.join(map(str, args.scales))} agents on SQLite and Redis")
        results["registry"] = registry.run(work / "registry", cpus, args.scales,
                                           max(secs / 2, 2), min(warm, 1.0))
    if "profile" in args.only:
        say("profile: py-spy on Butler under 64 connections")
        results["profile"] = profile.run(work, cpus, max(secs + 2, 3))
    if "intent" in args.only:
        from intent import runner

        say("intent: Butler's router, BM25 and TF-IDF on bench/intent's test half")
        results["intent"] = runner.run("test", rounds=2 if args.quick else 5)
    check_speed("at the end")
    results["targets"] = targets.evaluate(results)
    results["max_noise_cpu_pct"] = max(noise.points(results), default=0.0)
    results["elapsed_seconds"] = round(time.monotonic() - began, 1)
    return results


def write_docs(results: dict[str, Any]) -> None:
    from harness import machine, report

    text = DOC.read_text()
    if DOC_START not in text or DOC_END not in text:
        say(f"{DOC} has no {DOC_START} ... {DOC_END} section; not updated")
        return
    body = (f"Run of {results['machine']['date']} ({results['mode']}, "
            f"{results['elapsed_seconds']:.0f} s): {machine.one_line(results['machine'])}.\n\n"
            + report.markdown(results))
    head, _, rest = text.partition(DOC_START)
    _, _, tail = rest.partition(DOC_END)
    DOC.write_text(f"{head}{DOC_START}\n{body}\n{DOC_END}{tail}")
    say(f"updated {DOC.relative_to(bootstrap.REPO)}")


def render(args: argparse.Namespace) -> int:
    from harness import inbound, report, targets
    from harness.profile_summary import summarise

    results = json.loads(args.render.read_text())
    # Comparisons and targets from the series, as this version of the bench makes them.
    if "inbound" in results:
        results["inbound"]["ratios"] = inbound.all_ratios(results["inbound"])
    results["targets"] = targets.evaluate(results)
    raw = bootstrap.REPO / results.get("profile", {}).get("raw_stacks", "-")
    if raw.is_file():  # the summary's rules may have changed since that run
        results["profile"].update(summarise(raw))
        args.render.write_text(json.dumps(results, indent=1) + "\n")
    print(report.text(results))
    if "profile" in results:
        print(report.hotspots_text(results["profile"]))
    if args.update_docs:
        write_docs(results)
    return 0


def main(argv: list[str]) -> int:
    args = parse(argv)
    servers = not set(args.only) <= IN_PROCESS
    if not args.no_install and not bootstrap.in_bench_venv():
        if servers:
            bootstrap.ensure_tools()
        bootstrap.ensure_venv()
        bootstrap.reexec_in_venv(Path(__file__).resolve(), argv)
    if args.render is not None:
        return render(args)
    if servers and shutil.which("wrk") is None:
        say("wrk is required (apt-get install wrk); run without --no-install to install it")
        return 2
    from harness import report

    work = bootstrap.BENCH / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    results = measure(args, work)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    print(report.text(results))
    if "profile" in results:
        print(report.hotspots_text(results["profile"]))
    print(f"\nresults: {args.output}  ({results['elapsed_seconds']:.0f} s)")
    if args.update_docs:
        write_docs(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
