"""``butler agents``: the agents a running daemon hosts under ``/{id}/``, listed, added and
removed without a restart (``/v2/admin/agents``, a token of tier admin; docs/hosting.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import yaml

from butler.cli.remote import run_remote, token_args
from butler.cli.render import one_line
from internal.protocol.a2a.client import BlockingV2Transport
from internal.protocol.a2a.model import DelegationFailed

if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

PATH = "/v2/admin/agents"


def add_parsers(sub: SubParsers) -> None:
    agents = sub.add_parser("agents", help="list, add or remove the agents a daemon hosts")
    asub = agents.add_subparsers(dest="agents_command", metavar="ACTION", required=True)
    lst = asub.add_parser("list", help="the hosted agents: id, URL, where defined, skills")
    lst.add_argument("url", help="the daemon's base URL")
    token_args(lst)
    lst.set_defaults(handler=lambda a: run_remote(a, _list))
    add = asub.add_parser("add", help="host one more agent, now and after restarts",
                          description="FILE holds one agents: entry (YAML or JSON): id, "
                                      "name, token_hashes, skills, peers, swarm, registry.")
    add.add_argument("url", help="the daemon's base URL")
    add.add_argument("file", help="the agent's entry, YAML or JSON ('-': standard input)")
    token_args(add)
    add.set_defaults(handler=_add_cmd)
    remove = asub.add_parser("remove", help="stop hosting an agent added at run time")
    remove.add_argument("url", help="the daemon's base URL")
    remove.add_argument("id", help="the agent's id")
    token_args(remove)
    remove.set_defaults(handler=lambda a: run_remote(a, _remove))


def _print(args: argparse.Namespace, data: Any, line: str) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else line)


def _agent(client: BlockingV2Transport, data: Any) -> dict[str, Any]:
    """A hosted agent as the daemon describes it, or a clear error (never a traceback)
    when the URL answers something else."""
    if not (isinstance(data, dict) and all(isinstance(data.get(k), str)
                                           for k in ("id", "url", "source"))
            and isinstance(data.get("skills"), list)
            and all(isinstance(s, str) for s in data["skills"])):
        raise DelegationFailed("peer_error", f"{client.name} sent an answer that is not a "
                                             "hosted agent")
    return data


def _list(args: argparse.Namespace, client: BlockingV2Transport) -> int:
    data = client.request("GET", PATH)
    agents = data.get("agents") if isinstance(data, dict) else None
    if not isinstance(agents, list):
        raise DelegationFailed("peer_error", f"{client.name} sent no list of agents")
    if args.json:
        _print(args, data, "")
        return 0
    for agent in (_agent(client, a) for a in agents):
        print(one_line(f"{agent['id']}  {agent['url']}  ({agent['source']})  "
                       f"skills: {', '.join(agent['skills']) or '-'}", 2000))
    return 0


def _add_cmd(args: argparse.Namespace) -> int:
    """The entry is read (and its syntax checked) before the daemon is called."""
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text("utf-8")
        args.entry = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        print(f"butler: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    if not isinstance(args.entry, dict):
        print(f"butler: {args.file}: expected one agent entry (a mapping)", file=sys.stderr)
        return 2
    return run_remote(args, _add)


def _add(args: argparse.Namespace, client: BlockingV2Transport) -> int:
    data = _agent(client, client.request("POST", PATH, body=args.entry))
    _print(args, data, one_line(f"hosting {data['id']} at {data['url']}", 2000))
    return 0


def _remove(args: argparse.Namespace, client: BlockingV2Transport) -> int:
    data = client.request("DELETE", f"{PATH}/{quote(args.id, safe='')}")
    _print(args, data, f"removed {args.id}")
    return 0
