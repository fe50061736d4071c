"""``butler demo``: two real instances on loopback; home delegates to office.

Everything is generated in a temporary folder: token/hash pairs, two configs, two
daemons started as subprocesses. Nothing outside that folder is touched.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from butler.cli.render import print_task
from internal.protocol.a2a.auth import hash_token, new_token
from internal.protocol.a2a.client import PeerClient
from internal.protocol.a2a.types import TaskRequest


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="run two instances on loopback and delegate between them")
    demo.add_argument("--keep", action="store_true", help="keep the temporary folder")
    demo.set_defaults(handler=_demo)


def _config(agent: str, accept: dict[str, str], peers: list[dict[str, Any]],
            skills: list[dict[str, Any]], data: Path) -> str:
    return yaml.safe_dump({
        "agent": {"id": agent, "name": f"{agent.title()} Butler", "description": f"demo {agent}"},
        "data_dir": str(data),
        "configurations": {
            "a2a": {"enabled": True, "port": 0, "bind_address": "127.0.0.1",
                    "token_hashes": [{"sha256": digest, "name": name}
                                     for name, digest in accept.items()]},
            "swarm": {"enabled": True, "max_depth": 4, "budget_usd": "1.00"},
        },
        "skills": skills,
        "peers": peers,
    }, sort_keys=False)


def _start(name: str, config: Path, log: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "butler", "serve", "-c", str(config)],
        stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if " serving on " not in line:
        proc.kill()
        raise SystemExit(f"butler demo: {name} did not start:\n{log.read_text()}")
    url = line.rsplit(" ", 1)[1].strip()
    print(f"[demo] {name} is serving on {url}", file=sys.stderr)
    return proc, url


def _demo(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="butler-demo-"))
    print(f"[demo] working in {tmp}", file=sys.stderr)
    home_to_office, office_to_home, operator = new_token(), new_token(), new_token()
    office_cfg = tmp / "office.yaml"
    office_cfg.write_text(_config(
        "office", {"home": hash_token(home_to_office), "operator": hash_token(operator)},
        [],
        [{"id": "memory.write", "builtin": "memory.write", "cost_usd": "0.02", "expose": True},
         {"id": "memory.read", "builtin": "memory.read", "cost_usd": "0.01", "expose": True},
         {"id": "memory.search", "builtin": "memory.search", "expose": True}],
        tmp / "office-data"))
    procs = []
    try:
        office, office_url = _start("office", office_cfg, tmp / "office.log")
        procs.append(office)
        (tmp / "home-to-office.token").write_text(home_to_office)
        home_cfg = tmp / "home.yaml"
        home_cfg.write_text(_config(
            "home", {"office": hash_token(office_to_home), "operator": hash_token(operator)},
            [{"name": "office", "url": office_url,
              "token_file": str(tmp / "home-to-office.token"),
              "capabilities": ["memory.write", "memory.read", "memory.search"]}],
            [{"id": "echo", "builtin": "echo", "capabilities": ["echo"], "expose": True}],
            tmp / "home-data"))
        home, home_url = _start("home", home_cfg, tmp / "home.log")
        procs.append(home)
        return asyncio.run(_conversation(home_url, operator))
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"[demo] kept {tmp}", file=sys.stderr)


async def _conversation(home_url: str, token: str) -> int:
    async with aiohttp.ClientSession() as session:
        home = PeerClient(home_url, token, session=session, name="home")
        print("\n== 1. ask home to remember a fact; home has no memory skill, so it delegates "
              "to office")
        write = await home.submit(TaskRequest(
            text="The office printer's PIN is 4711", input={"key": "printer-pin"},
            capabilities_needed=("memory.write",)))
        print_task(write)
        print("\n== 2. ask home to read it back (delegated to office again)")
        read = await home.submit(TaskRequest(
            text="", input={"key": "printer-pin"}, capabilities_needed=("memory.read",)))
        print_task(read)
        ok = write.state.value == "completed" and read.state.value == "completed" and \
            "4711" in "".join(p.text or "" for p in read.parts)
        print("\n[demo] " + ("delegation round trip OK" if ok else "delegation FAILED"))
        return 0 if ok else 1

