"""``butler demo``: two real instances on loopback; home delegates to office.

Everything is generated in a temporary folder: token/hash pairs, two configs, two
daemons started as subprocesses. Nothing outside that folder is touched.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from butler.cli.render import print_task
from butler.cli.route_cmd import rank
from butler.config.loader import load_config
from butler.registry.client import RegistryClient
from butler.routing import explain
from internal.http import CONFIGURED, OutboundGuard, hash_token, new_token, outbound_session
from internal.protocol.a2a.client import V2Transport
from internal.protocol.a2a.model import ButlerError, TaskRequest


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="run two instances on loopback and delegate between them")
    demo.add_argument("--keep", action="store_true", help="keep the temporary folder")
    demo.set_defaults(handler=_demo)


def _config(agent: str, accept: dict[str, str], peers: list[dict[str, Any]],
            skills: list[dict[str, Any]], data: Path, registry: dict[str, Any]) -> str:
    return yaml.safe_dump({
        "agent": {"id": agent, "name": f"{agent.title()} Butler", "description": f"demo {agent}"},
        "data_dir": str(data),
        "configurations": {
            "a2a": {"enabled": True, "port": 0, "bind_address": "127.0.0.1",
                    "token_hashes": [{"sha256": digest, "name": name}
                                     for name, digest in accept.items()]},
            "swarm": {"enabled": True, "max_depth": 4, "budget_usd": "1.00"},
            "registry": registry,
        },
        "skills": skills,
        "peers": peers,
    }, sort_keys=False)


def _start(name: str, command: list[str], log: Path) -> tuple[subprocess.Popen[str], str]:
    """Start ``butler <command>`` and return it with the URL its first line announces."""
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "butler", *command],
                                stdout=subprocess.PIPE, stderr=err, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"https?://\S+", line)
    if match is None:
        proc.kill()
        raise SystemExit(f"butler: demo: {name} did not start:\n{log.read_text()}")
    url = match.group(0)
    print(f"[demo] {name} is serving on {url}", file=sys.stderr)
    return proc, url


def _demo(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="butler-demo-"))
    print(f"[demo] working in {tmp}", file=sys.stderr)
    tokens = {name: new_token() for name in
              ("home-to-office", "office-to-home", "operator", "office-reg", "home-reg")}
    for name, token in tokens.items():
        (tmp / f"{name}.token").write_text(token)
    procs: list[subprocess.Popen[str]] = []
    try:
        (tmp / "registry.yaml").write_text(yaml.safe_dump({"registry": {
            "port": 0, "data_dir": str(tmp / "registry-data"),
            "token_hashes": [{"sha256": hash_token(tokens["office-reg"]), "name": "office"},
                             {"sha256": hash_token(tokens["home-reg"]), "name": "home"}]}}))
        registry, registry_url = _start(
            "registry", ["registry", "serve", "-c", str(tmp / "registry.yaml")],
            tmp / "registry.log")
        procs.append(registry)

        def reg(who: str, announce: bool, peer_token: str) -> dict[str, Any]:
            return {"self_register": announce, "url": registry_url, "health_ttl_minutes": 1,
                    "token_file": str(tmp / f"{who}-reg.token"),
                    "peer_token_file": str(tmp / f"{peer_token}.token"),
                    # peer_token goes only to agents these registry identities registered
                    "trusted_registrants": ["office", "home"]}

        (tmp / "office.yaml").write_text(_config(
            "office", {"home": hash_token(tokens["home-to-office"]),
                       "operator": hash_token(tokens["operator"])},
            [],
            [{"id": "memory.write", "builtin": "memory.write", "cost_usd": "0.02",
              "expose": True},
             {"id": "memory.read", "builtin": "memory.read", "cost_usd": "0.01", "expose": True},
             {"id": "memory.search", "builtin": "memory.search", "cost_usd": "0.005",
              "expose": True},
             # What step 4 finds by its words alone: home knows it only from office's card.
             {"id": "office.action_items", "builtin": "memory.search", "cost_usd": "0.005",
              "name": "Action items", "capabilities": ["action_items"], "expose": True,
              "description": "Pending action items and to-dos from office meetings",
              "tags": ["action items", "todo", "follow-ups"],
              "examples": ["any pending action items from the team meeting?"]}],
            tmp / "office-data", reg("office", True, "office-to-home")))
        office, office_url = _start("office", ["serve", "-c", str(tmp / "office.yaml")],
                           tmp / "office.log")
        procs.append(office)
        # home knows office statically for writing and reading; memory.search it must find
        # through the registry.
        (tmp / "home.yaml").write_text(_config(
            "home", {"office": hash_token(tokens["office-to-home"]),
                     "operator": hash_token(tokens["operator"])},
            [{"name": "office", "url": office_url,
              "token_file": str(tmp / "home-to-office.token"),
              "capabilities": ["memory.write", "memory.read"]}],
            [{"id": "echo", "builtin": "echo", "capabilities": ["echo"], "expose": True}],
            tmp / "home-data", reg("home", False, "home-to-office")))
        home, home_url = _start("home", ["serve", "-c", str(tmp / "home.yaml")],
                                tmp / "home.log")
        procs.append(home)
        return asyncio.run(_conversation(home_url, tokens["operator"], registry_url,
                                         tokens["home-reg"], tmp / "home.yaml"))
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
            if proc.stdout is not None:
                proc.stdout.close()
        if args.keep:
            print(f"[demo] kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


async def _conversation(home_url: str, token: str, registry_url: str, reg_token: str,
                        home_config: Path) -> int:
    async with outbound_session(OutboundGuard(CONFIGURED)) as session:
        home = V2Transport(home_url, token, session=session, name="home")
        registry = RegistryClient(registry_url, reg_token, session=session)
        print("== 0. the registry: who provides memory.search?")
        for entry in await registry.find(capability="memory.search"):
            print(f"  {entry.name} at {entry.url}: {', '.join(entry.capabilities)}")
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
        print("\n== 3. ask home to search its memory: home has no memory.search and no static "
              "peer for it, so it finds office through the registry")
        search = await home.submit(TaskRequest(text="what is the printer PIN?",
                                               capabilities_needed=("memory.search",)))
        print_task(search)
        print("\n== 4. ask home in plain words, naming no skill and no capability: its intent "
              "router ranks its own skills and office's card, and sends it to office")
        asked = "check with my office for pending action items"
        print(explain(await rank(load_config(home_config), asked, cards=True)))
        await home.submit(TaskRequest(
            text="Action item: send the quarterly report to Anna by Friday",
            capabilities_needed=("memory.write",)))
        routed = await home.submit(TaskRequest(text=asked))
        print_task(routed)
        safe = await _safety_rules(home)
        done = all(t.state.value == "completed" for t in (write, read, search, routed))
        ok = safe and done and all(
            "4711" in "".join(p.text or "" for p in t.parts) for t in (read, search)) and (
            routed.cost is not None and routed.cost.children[0].skill == "office.action_items")
        print("\n[demo] " + ("delegation round trip OK, and every rule held" if ok
                             else "delegation FAILED"))
        return 0 if ok else 1



# Each rule: its name, the task that breaks it, the chain and budget it claims, the code.
_RULES: tuple[tuple[str, str, tuple[str, ...], str | None, str], ...] = (
    ("loop", "the caller chain already holds home", ("home", "operator"), None,
     "loop_detected"),
    ("depth", "the task already passed through 5 agents, home's max_depth is 4",
     ("agent-1", "agent-2", "agent-3", "agent-4", "operator"), None, "depth_exceeded"),
    ("budget", "memory.write costs 0.02 USD at office, the caller gives 0.01 USD", (), "0.01",
     "budget_exhausted"),
)


async def _safety_rules(home: V2Transport) -> bool:
    """Step 5: three tasks that each break a swarm rule; none runs a skill or spends."""
    print("\n== 5. the safety rules: three tasks that break one each; every one is refused "
          "before any skill runs")
    ok = True
    for rule, story, chain, budget, expected in _RULES:
        request = TaskRequest(text="The office printer's PIN is 4711",
                              input={"key": "printer-pin"}, capabilities_needed=("memory.write",))
        try:
            task = await home.submit(request, chain=chain,
                                     budget=Decimal(budget) if budget else None)
        except ButlerError as err:  # home refused it: no task was created
            code, where = err.code, "home refused it, no task was created"
        else:  # home passed the budget on, and office refused (home knows no price)
            code = task.error.code if task.error else task.state.value
            spent = task.budget.spent_usd if task.budget else "?"
            where = f"office refused it, the task failed, {spent} USD spent"
        print(f"  {rule}: {story} -> {code}: {where}")
        ok = ok and code == expected
    return ok
