"""Which project modules one request runs through: a local ``SendMessage`` (the echo skill)
and a delegated one (to a second instance), each counted apart.

    PYTHONPATH=. .venv/bin/python bench/module_path.py [--list]

Two daemons start in this process: ``office`` has the echo skill, ``home`` has none and
``office`` as its peer, so a task in plain words sent to ``home`` is routed to ``office``.
Each kind of request is sent once to warm up (first-use imports, the peer's card, pooled
connections), then ``--runs`` times measured: a profile hook on every thread records the code
objects that start between the request being sent and its answer arriving, and the
modules of those under ``butler/`` and ``internal/`` are counted. Both sides of a
delegation run in this process, so the delegated count includes the peer's modules. Work
a request sets off that may or may not fall inside its window (the audit writer's flush)
makes the counts vary a little: the median is the figure, ``--list`` prints every module
seen in any of them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from internal.http import hash_token, new_token  # noqa: E402 -- after the path is set

BODY = ('{"jsonrpc":"2.0","id":"%s","method":"SendMessage","params":{"message":'
        '{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"echo hello"}]}}}')
ECHO = {"id": "echo", "builtin": "echo", "capabilities": ["bench.echo"], "expose": True,
        "description": "echoes the task back", "tags": ["echo"], "examples": ["echo hello"]}
PROJECT = (str(ROOT / "butler") + "/", str(ROOT / "internal") + "/")
PAUSE_SECONDS = 0.3


class ModuleTrace:
    """The project files whose functions are called while ``on`` is set, on any thread
    started after ``install``."""

    def __init__(self) -> None:
        self.on = False
        self.files: set[str] = set()

    def _hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.on and event == "call":
            name = frame.f_code.co_filename
            if name.startswith(PROJECT):
                self.files.add(name)

    def install(self) -> None:
        sys.setprofile(self._hook)
        threading.setprofile(self._hook)

    def modules(self) -> list[str]:
        out = set()
        for name in self.files:
            parts = Path(name).relative_to(ROOT).with_suffix("").parts
            out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        return sorted(out)


def _config(agent_id: str, work: Path, accept: dict[str, str], skills: list[dict[str, Any]],
            peers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "agent": {"id": agent_id, "name": f"Path {agent_id}"},
        "data_dir": str(work / f"{agent_id}-data"),
        "configurations": {
            "a2a": {"enabled": True, "port": 0, "bind_address": "127.0.0.1",
                    "token_hashes": [{"sha256": hash_token(tok), "name": name}
                                     for name, tok in accept.items()]},
            "swarm": {"enabled": True, "max_depth": 4, "budget_usd": "1.00"},
        },
        "logging": {"level": "warning"},
        "skills": skills,
        "peers": peers,
    }


async def _send(session: aiohttp.ClientSession, url: str, token: str, n: str) -> None:
    async with session.post(f"{url}/a2a/jsonrpc", data=BODY % (n, n), headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json",
            "A2A-Version": "1.0"}) as resp:
        answer = await resp.text()
    if resp.status != 200 or "TASK_STATE_COMPLETED" not in answer:
        raise RuntimeError(f"bad answer: {resp.status} {answer[:300]}")


async def _measure(trace: ModuleTrace, session: aiohttp.ClientSession, url: str, token: str,
                   kind: str, runs: int) -> list[list[str]]:
    """The modules of each of ``runs`` requests, after one to warm up."""
    await _send(session, url, token, f"{kind}-warm")
    found = []
    for n in range(runs):
        # The previous request's after-work (its audit records written, the WAL
        # checkpointed) is its own, not this one's: let it end outside the window.
        await asyncio.sleep(PAUSE_SECONDS)
        trace.files.clear()
        trace.on = True
        try:
            await _send(session, url, token, f"{kind}-{n}")
        finally:
            trace.on = False
        found.append(trace.modules())
    return found


async def _main(work: Path, show: bool, runs: int) -> dict[str, list[list[str]]]:
    from butler.config import load_config
    from butler.daemon import Daemon
    from butler.delegation.wiring import make_delegator

    trace = ModuleTrace()
    trace.install()  # before the daemons start their threads
    operator, link = new_token(), new_token()
    daemons: list[Daemon] = []
    try:
        cfg = _config("office", work, {"operator": operator, "home": link}, [ECHO], [])
        (work / "office.yaml").write_text(yaml.safe_dump(cfg))
        office = Daemon(load_config(work / "office.yaml"), delegator_factory=make_delegator)
        await office.start()
        daemons.append(office)
        (work / "link.token").write_text(link)
        peer = {"name": "office", "url": office.url, "token_file": str(work / "link.token"),
                "capabilities": ["bench.echo"]}
        cfg = _config("home", work, {"operator": operator}, [], [peer])
        (work / "home.yaml").write_text(yaml.safe_dump(cfg))
        home = Daemon(load_config(work / "home.yaml"), delegator_factory=make_delegator)
        await home.start()
        daemons.append(home)
        async with aiohttp.ClientSession() as session:
            found = {"local": await _measure(trace, session, office.url, operator, "local",
                                             runs),
                     "delegated": await _measure(trace, session, home.url, operator,
                                                 "delegated", runs)}
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        for daemon in reversed(daemons):
            await daemon.stop()
    for kind, each in found.items():
        counts = sorted(len(modules) for modules in each)
        every = sorted(set().union(*each))
        print(f"{kind}: {counts[len(counts) // 2]} project modules (median of {runs} requests; "
              f"fewest {counts[0]}, most {counts[-1]}, {len(every)} in all)")
        if show:
            print("".join(f"  {m}\n" for m in every), end="")
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true", help="print the modules, too")
    ap.add_argument("--runs", type=int, default=9, help="measured requests of each kind")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="module-path-") as tmp:
        asyncio.run(_main(Path(tmp), args.list, args.runs))


if __name__ == "__main__":
    main()
