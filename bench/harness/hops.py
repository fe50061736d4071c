"""Scenario 3: per-hop overhead. Chains of 1..N Butlers on loopback; the first is called
with a blocking echo task needing ``bench.echo``, each delegates to the next, only the
last runs the skill. One connection (no queueing), so latency differences are the hops."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from harness import butlers, wrk
from harness.procs import Cpus, http_json


def _check(first: butlers.Butler, length: int) -> None:
    body = butlers.v2_body("chain check").encode()
    status, raw = http_json("POST", first.url + "/v2/tasks", body,
                            {"Authorization": f"Bearer {first.token}"})
    text = raw.decode(errors="replace")
    if status != 200 or '"state":"completed"' not in text:
        raise RuntimeError(f"chain of {length} did not complete an echo: {status} {text[:500]}")
    if text.count('"agent":') != length:
        raise RuntimeError(f"chain of {length}: cost tree does not show {length} hops: "
                           f"{text[:500]}")


def run(work: Path, cpus: Cpus, max_hops: int, seconds: float,
        warmup: float) -> dict[str, Any]:
    chains: list[dict[str, Any]] = []
    for length in range(1, max_hops + 1):
        folder = work / f"chain{length}"
        folder.mkdir(parents=True, exist_ok=True)
        chain = butlers.start_chain(folder, length, cpus.server)
        try:
            _check(chain[0], length)
            load = wrk.Load(path="/v2/tasks", body=butlers.v2_body(), tokens=(chain[0].token,),
                            expect='"state":"completed"')
            result = wrk.measure(chain[0].url, load, connections=1, seconds=seconds,
                                 warmup=warmup, cpu=cpus.load,
                                 pids=tuple(b.server.pid for b in chain))
        finally:
            for b in chain:
                b.server.stop()
        row: dict[str, Any] = {"instances": length, **result.to_json()}
        if chains:
            prev = chains[-1]
            row["added_p50_ms"] = round(result.p50_ms - prev["p50_ms"], 3)
            row["added_p99_ms"] = round(result.p99_ms - prev["p99_ms"], 3)
        chains.append(row)
        print(f"[bench]   chain of {length}: p50 {result.p50_ms:7.2f} ms  "
              f"p99 {result.p99_ms:7.2f} ms  ({result.rps:.0f} req/s)", file=sys.stderr)
    summary: dict[str, Any] = {"chains": chains}
    if len(chains) > 1:
        span = len(chains) - 1
        summary["per_hop_p50_ms"] = round((chains[-1]["p50_ms"] - chains[0]["p50_ms"]) / span, 3)
        summary["per_hop_p99_ms"] = round((chains[-1]["p99_ms"] - chains[0]["p99_ms"]) / span, 3)
    return summary
