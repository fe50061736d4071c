"""``butler spend``: each limited caller's spending over the last hour and day, and its
limits, read from the data folder's ``spend.db`` (beside a running daemon, as ``butler
audit`` reads ``audit.db``)."""

from __future__ import annotations

import argparse
import json
import os
import time
from decimal import Decimal

from butler.cli.serve import agent_arg, load_or_exit
from butler.swarm.spend import SpendBook, caller_json
from butler.swarm.spend_store import FILE_NAME, MinuteRow, OpenRow, SpendStore
from butler.swarm.spend_windows import DAY, SECONDS, Usage


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("spend", help="show each limited caller's spending (last hour, last "
                                     "day) and its limits")
    p.add_argument("-c", "--config", default=os.environ.get("BUTLER_CONFIG"))
    p.add_argument("--json", action="store_true")
    agent_arg(p)
    p.set_defaults(handler=_spend)


def _spend(args: argparse.Namespace) -> int:
    config = load_or_exit(args.config, secrets=False, agent=args.agent)  # its data folder
    if config is None:
        return 2
    limits = config.a2a.caller_limits
    rows: list[MinuteRow] = []
    open_rows: list[OpenRow] = []
    if (config.data_dir / FILE_NAME).exists():
        store = SpendStore.open_blocking(config.data_dir)
        try:
            rows, open_rows = store.read(int(time.time() // SECONDS) - DAY)
        finally:
            store.db.close_blocking()
    usage = {u.caller: u for u in SpendBook(limits, rows=rows).usage(open_rows)}
    if args.json:
        print(json.dumps([caller_json(name, lim, usage.get(name))
                          for name, lim in sorted(limits.items())], indent=2))
        return 0
    if not limits:
        print("no caller has limits (configurations.a2a.token_hashes[].limits)")
    for name, lim in sorted(limits.items()):
        print(name)
        use = usage.get(name)
        if use is not None:
            print(f"  last hour: {_window(use.hour, lim.max_usd_per_hour, lim.max_tasks_per_hour)}")
            print(f"  last day:  {_window(use.day, lim.max_usd_per_day, lim.max_tasks_per_day)}")
            if lim.max_usd_per_task is not None:
                print(f"  per task:  at most {lim.max_usd_per_task} USD")
            print(f"  running:   {use.running} task(s) holding {use.reserved_usd} USD")
        print(f"  skills:    {_grant(lim.skills)}")
        print(f"  capabilities: {_grant(lim.capabilities)}")
    return 0


def _window(use: Usage, usd_cap: Decimal | None, task_cap: int | None) -> str:
    usd = f"{use.usd} of {usd_cap} USD" if usd_cap is not None else f"{use.usd} USD"
    tasks = f"{use.tasks} of {task_cap} tasks" if task_cap is not None else f"{use.tasks} tasks"
    return f"{usd}, {tasks}"


def _grant(names: tuple[str, ...] | None) -> str:
    return "any" if names is None else ", ".join(names) or "none"
