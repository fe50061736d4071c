"""The event loop's py-spy samples of ``cpu_per_task.py --profile`` grouped by component.

    python bench/spy_components.py OLD-v2-0.txt:193 NEW-v2-0.txt:432 [...]

Each argument is one raw py-spy profile (``-f raw --threads``) and the loop's µs of CPU
per request measured without the profiler (``cpu_per_task.py`` without ``--profile``).
Each sample of the main thread goes to the first component below that a frame of its
stack names (so a receipt's signature counts once, under the seal, not again under the
engine), except aiohttp and "ours otherwise", which are judged by the innermost frame;
the component's share of the samples times the given µs is printed, one column a file.
py-spy over-counts system calls (bench/HISTORY.md, "Where the CPU per task went since
8071e4e"): check a surprising entry
with ``timeit`` before acting on it.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

COMPONENTS: list[tuple[str, list[str]]] = [
    ("receipt seal: Ed25519 sign", [r"IdentityKey\.sign"]),
    ("receipt seal: digests, claims, JWS", [r"^seal \(butler/identity/receipts"]),
    ("row's compact receipts (Signers.stored)", [r"Signers\.stored", r"Signers\.rebuilt"]),
    ("row encode", [r"row_columns", r"_upsert_args", r"encode_row"]),
    ("group commit (BatchWriter)", [r"BatchWriter\."]),
    ("audit records", [r"_audit", r"audit/", r"Daemon\._record"]),
    ("swarm admission, decision, spend", [r"swarm/", r"spend"]),
    ("task ids", [r"butler/runtime/ids\.py", r"token_hex"]),
    ("answer's JSON (task_json)", [r"task_json", r"encode_task", r"json/encoder"]),
    ("request decode", [r"read_json", r"_body \(", r"decode_"]),
    ("state changes and copies",
     [r"transitions\.py", r"replace \(dataclasses", r"__create_fn__"]),
    ("events, waiters, outcome",
     [r"butler/[a-z/_]*events", r"_outcome \(", r"outcome\.py"]),
    ("engine otherwise", [r"butler/engine/"]),
    ("gate, auth, error middleware",
     [r"_gate\.py", r"gate\.py", r"_auth\.py", r"auth\.py", r"error_middleware"]),
    ("metrics, telemetry", [r"metrics\.py", r"opentelemetry", r"telemetry"]),
    ("aiohttp", [r"aiohttp/"]),
    ("ours otherwise", [r"butler/", r"internal/"]),
    ("asyncio and the rest", [r".*"]),
]
_BY_LEAF = ("aiohttp", "ours otherwise")


def shares(path: str) -> Counter[str]:
    """The share (0..1) of the main thread's samples in ``path`` by component."""
    counts: Counter[str] = Counter()
    total = 0
    with open(path) as raw:
        for line in raw:
            stack, _, count = line.rstrip().rpartition(" ")
            frames = stack.split(";")
            if "MainThread" not in frames[0]:
                continue
            frames, n = frames[1:], int(count)
            total += n
            for name, patterns in COMPONENTS:
                seen = frames[-1:] if name in _BY_LEAF else frames
                if any(re.search(p, frame) for p in patterns for frame in seen):
                    counts[name] += n
                    break
    return Counter({name: n / max(total, 1) for name, n in counts.items()})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profiles", nargs="+", help="PROFILE.txt:LOOP_US_PER_REQUEST")
    args = ap.parse_args()
    columns = []
    for arg in args.profiles:
        path, _, micros = arg.rpartition(":")
        share = shares(path)
        columns.append({name: share[name] * float(micros) for name, _ in COMPONENTS})
    for name, _ in COMPONENTS:
        print(" ".join(f"{col[name]:6.1f}" for col in columns), " ", name)
    print(" ".join(f"{sum(col.values()):6.1f}" for col in columns), "  total µs per request")


if __name__ == "__main__":
    main()
