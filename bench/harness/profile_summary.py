"""Reduce py-spy's collapsed stacks ("thread (tid): name;frame;...;frame count") to what
an optimiser needs: where the CPU goes by kind of work and thread, the top functions by
self time, and Butler's own functions by inclusive time. Percentages are of the samples
in which the process was doing something (a pool thread parked on its queue is idle)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from harness.bootstrap import REPO

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
_STDLIB = re.compile(r"(?:^|/)lib/python3\.\d+/")
# Leaf file patterns -> kind of work, first match wins (see categorise()).
_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("JSON encode/decode", ("json/", "jsonwire.py")),
    ("OpenTelemetry", ("opentelemetry/",)),
    ("HTTP (aiohttp, multidict, yarl)", ("aiohttp/", "multidict/", "yarl/")),
    ("asyncio loop and transports", ("asyncio/", "selectors.py")),
    ("object construction and copies (dataclasses)", ("dataclasses.py", "<string>")),
    ("ids and randomness (uuid, secrets)", ("uuid.py", "random.py", "secrets.py")),
    ("SQLite calls (task store)", ("butler/engine/store.py", "butler/storage/_batch_writer.py",
                                   "butler/storage/_checkpointer.py")),
    ("SQLite calls (audit log)", ("butler/audit/",)),
    ("SQLite calls (other)", ("sqlite3/", "workspace.py", "butler/memory/", "butler/storage/")),
    ("Butler engine, swarm, skills", ("butler/",)),
    ("protocol codecs and handlers", ("internal/protocol/",)),
)
_REPO = str(REPO) + "/"
_IDLE = ("_worker (concurrent/futures/thread.py)", "Thread.wait (threading.py)",
         "Database._serve (butler/storage/_database.py)")  # a worker waiting for jobs


def _is_stdlib(path: str) -> bool:
    return bool(_STDLIB.search(path)) and "site-packages/" not in path


def frame_name(raw: str) -> tuple[str, str]:
    """("Function (short/path.py)", full path) for one py-spy frame."""
    match = _FRAME.match(raw)
    if match is None:
        return raw, ""
    path = match["file"]
    short = path
    if "site-packages/" in short:
        short = short.split("site-packages/", 1)[1]
    elif _STDLIB.search(short):
        short = _STDLIB.split(short, 1)[-1]
    elif short.startswith(_REPO):
        short = short.removeprefix(_REPO)
    return f"{match['func']} ({short})", path


def categorise(frames: list[tuple[str, str]]) -> str:
    """The kind of work of one stack: by the leaf frame, except that a stdlib leaf with no
    kind of its own (enum, re, typing...) is charged to its nearest caller that has one."""
    for name, path in reversed(frames):
        probe = f"{path} {name}"
        for kind, patterns in _KINDS:
            if any(p in probe for p in patterns):
                return kind
        if not _is_stdlib(path) and not path.startswith("<"):
            return "other libraries"
    return "other"


def _is_ours(name: str, path: str) -> bool:
    """Butler's own code, without the frames nearly every stack passes through: the CLI
    entry and the HTTP middleware chain (each of those is ~100 % of a request)."""
    return (path.startswith(_REPO) and "/.venv/" not in path
            and path.removeprefix(_REPO).startswith(("butler/", "internal/"))
            and "/cli/" not in path and not path.endswith("__main__.py")
            and "middleware" not in name and "<lambda>" not in name)


def _thread_label(head: str) -> str:
    name = head.split(": ", 1)[-1] if head.startswith("thread") else "?"
    name = re.sub(r"_\d+$", "", name)
    return {"MainThread": "event loop"}.get(name, name)


def summarise(raw_file: Path, top: int = 15) -> dict[str, Any]:
    self_time: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    kinds: Counter[tuple[str, str]] = Counter()
    threads: Counter[str] = Counter()
    idle = active = 0
    for line in raw_file.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        head, *rest = stack.split(";")
        frames = [frame_name(f) for f in rest]
        if not frames or frames[-1][0] in _IDLE:
            idle += count
            continue
        active += count
        thread = _thread_label(head)
        threads[thread] += count
        kinds[(categorise(frames), thread)] += count
        self_time[f"[{thread}] {frames[-1][0]}"] += count
        for name in {n for n, p in frames if _is_ours(n, p)}:
            ours[name] += count

    def pct(n: int) -> float:
        return round(100 * n / active, 1) if active else 0.0

    by_kind: Counter[str] = Counter()
    for (kind, _), n in kinds.items():
        by_kind[kind] += n
    return {
        "samples": active + idle, "active_samples": active,
        "threads": [{"thread": t, "percent": pct(n)} for t, n in threads.most_common()],
        "kinds": [{"kind": k, "percent": pct(n),
                   "by_thread": {t: pct(m) for (kk, t), m in kinds.items() if kk == k}}
                  for k, n in by_kind.most_common()],
        "self": [{"function": f, "percent": pct(n)} for f, n in self_time.most_common(top)],
        "inclusive": [{"function": f, "percent": pct(n)} for f, n in ours.most_common(top)],
    }
