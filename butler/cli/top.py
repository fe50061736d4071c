"""``butler top URL``: a live view of a Butler's running and recent tasks.

Every interval it reads ``GET /v2/tasks`` (newest first) and redraws the whole screen:
running tasks (not yet terminal, waiting ones included) with their age, then the recent
finished ones, each with its delegation tree (agent / skill: cost, time per hop) when
the task has one. Plain ANSI (clear and home the cursor, then print): no curses, no
alternate screen, so what is on the screen when you press Ctrl-C stays readable.

A failure on the first read (wrong token, nothing listening) ends the command with the
error, as any other; after that a failed refresh is shown in the header and tried again,
so the view survives a daemon restart.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from butler.cli.json_output import json_flag, print_json
from butler.cli.remote import config_url, run_remote, token_args
from butler.cli.render import cost_lines
from internal.protocol.a2a.client import BlockingV2Transport
from internal.protocol.a2a.codec import butler_v2
from internal.protocol.a2a.codec.butler_v2 import encode_task
from internal.protocol.a2a.model import ButlerError, DelegationFailed, Task

if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

CLEAR = "\x1b[H\x1b[2J"


def add_parsers(sub: SubParsers) -> None:
    top = sub.add_parser("top", help="a live view of running and recent tasks and their "
                                     "delegation trees")
    top.add_argument("url", nargs="?",
                     help="the Butler's base URL (default: the one the config names)")
    top.add_argument("-c", "--config", default=os.environ.get("BUTLER_CONFIG"), metavar="FILE",
                     help="read the URL from this daemon config when no URL is given "
                          "(default $BUTLER_CONFIG)")
    top.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                     help="seconds between refreshes (default 1)")
    top.add_argument("--limit", type=int, default=50,
                     help="how many of the newest tasks to read each time (default 50)")
    top.add_argument("--once", action="store_true",
                     help="print one frame, without clearing the screen, and exit")
    token_args(top, json=False)
    json_flag(top, "with --once: print the tasks read (running, then recent) as JSON")
    top.set_defaults(handler=_handler)


def _handler(args: argparse.Namespace) -> int:
    if args.json and not args.once:
        print("butler: top --json needs --once (a live view is for a terminal)",
              file=sys.stderr)
        return 2
    if args.url is None:
        url = config_url(args.config)
        if url is None:
            return 2
        args.url = url
    try:
        return run_remote(args, _top)
    except KeyboardInterrupt:  # the way to leave a live view: not an error
        print()
        return 0


def _terminal_size() -> os.terminal_size:
    """The terminal's size now (it may have been resized): the tty's own answer first, since
    COLUMNS and LINES in the environment are often stale copies."""
    try:
        return os.get_terminal_size(sys.stdout.fileno())
    except (OSError, ValueError):
        return shutil.get_terminal_size()


def _read(client: BlockingV2Transport, limit: int) -> list[Task]:
    data = client.request("GET", f"/v2/tasks?limit={max(1, min(limit, 200))}")
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
        raise DelegationFailed("peer_error", f"{client.name} sent an invalid task list")
    return [butler_v2.decode_task(item) for item in data["tasks"]]


def _top(args: argparse.Namespace, client: BlockingV2Transport) -> int:
    tasks = _read(client, args.limit)  # errors here end the command
    if args.json:
        print_json({"url": args.url,
                    "running": [encode_task(t) for t in tasks if not t.state.terminal],
                    "recent": [encode_task(t) for t in tasks if t.state.terminal]})
        return 0
    problem = ""
    while True:
        size = _terminal_size()
        lines = frame(args.url, tasks, problem, datetime.now(UTC), args.interval)
        if args.once:
            print("\n".join(lines))
            return 0
        shown = [line[:size.columns] for line in lines[:max(size.lines - 1, 3)]]
        sys.stdout.write(CLEAR + "\n".join(shown) + "\n")
        sys.stdout.flush()
        time.sleep(args.interval)
        try:
            tasks, problem = _read(client, args.limit), ""
        except ButlerError as err:  # keep the last tasks on screen, say why they are old
            problem = f"{err.code}: {err.message}"


def frame(url: str, tasks: list[Task], problem: str, now: datetime,
          interval: float) -> list[str]:
    """One screen: a header, the running tasks, the recent finished ones."""
    header = f"butler top  {url}  {now.strftime('%H:%M:%S')}  every {interval:g} s, Ctrl-C quits"
    lines = [header]
    if problem:
        lines.append(f"  refresh failed (showing the last answer): {problem}")
    running = [t for t in tasks if not t.state.terminal]
    done = [t for t in tasks if t.state.terminal]
    width = max((len(t.id) for t in tasks), default=2)
    lines.append("")
    lines.append(f"RUNNING ({len(running)})")
    lines.append(f"  {'ID':<{width}}  {'STATE':<14} {'SKILL':<16} {'AGE':>8}  SPENT")
    for task in running:
        lines += _task_lines(task, width, _age(task.created_at, now))
    lines.append("")
    lines.append(f"RECENT ({len(done)})")
    lines.append(f"  {'ID':<{width}}  {'STATE':<14} {'SKILL':<16} {'TOOK':>8}  SPENT")
    for task in done:
        lines += _task_lines(task, width, _took(task))
    return lines


def _task_lines(task: Task, width: int, when: str) -> list[str]:
    budget = task.budget
    spent = f"{budget.spent_usd} of {budget.start_usd} USD" if budget else "-"
    lines = [f"  {task.id:<{width}}  {task.state.value:<14} {task.skill or '-':<16} "
             f"{when:>8}  {spent}"]
    if task.error is not None:
        lines.append(f"      {task.error.code}: {task.error.message}")
    if task.cost is not None:
        lines += cost_lines(task.cost, 3)
    return lines


def _parse(stamp: str) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def _seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _age(created: str, now: datetime) -> str:
    start = _parse(created)
    return _seconds(max((now - start).total_seconds(), 0)) if start else "?"


def _took(task: Task) -> str:
    start, end = _parse(task.created_at), _parse(task.updated_at)
    if start is None or end is None:
        return "?"
    seconds = max((end - start).total_seconds(), 0)
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else _seconds(seconds)
