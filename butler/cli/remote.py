"""Commands that talk to a running Butler: send, tasks.

They use the blocking /v2 client (``BlockingV2Transport``): the same exchange rules and
outbound guard as the daemon's client, without aiohttp or an event loop to start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from butler.cli.json_output import error_json, json_flag, print_json
from butler.cli.render import (
    asked_by,
    one_line,
    print_task,
    print_task_header,
    print_task_line,
)
from internal.http import CONFIGURED, OutboundGuard
from internal.protocol.a2a.client import BlockingV2Transport
from internal.protocol.a2a.codec import butler_v2
from internal.protocol.a2a.model import (
    ButlerError,
    DelegationFailed,
    Task,
    TaskRequest,
    TaskState,
)

if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]


def token_args(p: argparse.ArgumentParser, *, json: bool = True) -> None:
    p.add_argument("--token-env", default="BUTLER_TOKEN", metavar="VAR",
                   help="environment variable holding the bearer token (default BUTLER_TOKEN)")
    p.add_argument("--token-file", metavar="FILE", help="read the bearer token from FILE")
    if json:
        json_flag(p, "print the daemon's answer as JSON")


def add_parsers(sub: SubParsers) -> None:
    send = sub.add_parser("send", help="submit a task and follow it until it ends")
    send.add_argument("url", help="the Butler's base URL")
    send.add_argument("text", help="the task, in words")
    send.add_argument("--capability", action="append", default=[], help="capability needed")
    send.add_argument("--skill", help="skill id to run")
    send.add_argument("--input", help="structured input as a JSON object")
    send.add_argument("--budget", help="USD budget for the whole chain")
    send.add_argument("--async", dest="is_async", action="store_true",
                      help="return at once with the task id")
    token_args(send)
    send.set_defaults(handler=lambda a: run_remote(a, _send))

    tasks = sub.add_parser("tasks", help="list, show, cancel, watch or answer tasks on a Butler")
    tsub = tasks.add_subparsers(dest="tasks_command", metavar="ACTION", required=True)
    lst = tsub.add_parser("list", help="list tasks (newest first)")
    lst.add_argument("url", help="the Butler's base URL")
    lst.add_argument("--state")
    lst.add_argument("--context", help="only tasks of this context id")
    lst.add_argument("--limit", type=int, default=20)
    lst.add_argument("--cursor", help="the next page, as printed after the previous one")
    token_args(lst)
    lst.set_defaults(handler=lambda a: run_remote(a, _list))
    answer = tsub.add_parser("answer", help="answer a task waiting in input-required")
    answer.add_argument("url")
    answer.add_argument("task_id")
    answer.add_argument("text")
    answer.add_argument("--input", help="structured answer as a JSON object")
    token_args(answer)
    answer.set_defaults(handler=lambda a: run_remote(a, _answer))
    for name, fn, text in (("get", _get, "show one task"), ("cancel", _cancel, "cancel a task"),
                           ("watch", _watch, "follow a task's events until it ends")):
        p = tsub.add_parser(name, help=text)
        p.add_argument("url", help="the Butler's base URL")
        p.add_argument("task_id", help="the task's id, as POST /v2/tasks returned it")
        token_args(p)
        p.set_defaults(handler=lambda a, fn=fn: run_remote(a, fn))


def read_token(args: argparse.Namespace) -> str:
    if args.token_file:
        try:
            return Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SystemExit(f"butler: cannot read token file: {exc.strerror}") from None
    token = os.environ.get(args.token_env, "").strip()
    if not token:
        raise SystemExit(f"butler: set {args.token_env} to the peer's bearer token "
                         "(or use --token-file)")
    return token


def config_url(path: str | None) -> str | None:
    """The URL of the daemon a config describes, for a command run beside it: its
    ``agent.url``, else its listener, with a wildcard bind reached on loopback. None (and
    the reason printed) when there is no config or it does not load."""
    from butler.cli.serve import load_or_exit  # only when asked: the config loader's imports
    from butler.config.model import http_url

    config = load_or_exit(path, secrets=False)  # the address only: no secret is read
    if config is None:
        return None
    if config.agent.url:
        return config.agent.url
    a2a = config.a2a
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(a2a.bind_address, a2a.bind_address)  # noqa: S104 -- a lookup, not a bind
    return http_url(host, a2a.port, tls=a2a.tls is not None)


Action = Callable[[argparse.Namespace, BlockingV2Transport], int]


def run_remote(args: argparse.Namespace, action: Action) -> int:
    if not args.url.startswith(("http://", "https://")):
        print(f"butler: {args.url!r} is not a URL: give the scheme too, e.g. "
              f"http://{args.url}", file=sys.stderr)
        return 2
    token = read_token(args)
    client = BlockingV2Transport(args.url, token, guard=OutboundGuard(CONFIGURED), timeout=3600)
    try:
        return action(args, client)
    except ButlerError as err:
        print(f"butler: {one_line(err.code, 64)}: {one_line(err.message, 2000)}",
              file=sys.stderr)
        if getattr(args, "json", False):
            print_json(error_json(err.code, err.message))
        return 1


def _json_input(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SystemExit(f"butler: --input is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SystemExit("butler: --input must be a JSON object")
    return data


def _task_path(task_id: str, action: str = "") -> str:
    return f"/v2/tasks/{quote(task_id, safe='')}" + (f"/{action}" if action else "")


def _raw_task(client: BlockingV2Transport, method: str, path: str,
              body: Any = None) -> tuple[dict[str, Any], Task]:
    """The daemon's answer as it sent it (for ``--json``) and decoded."""
    data = client.request(method, path, body=body)
    if not isinstance(data, dict):
        raise DelegationFailed("peer_error", f"{client.name} sent an invalid task")
    return data, butler_v2.decode_task(data)


def _send(args: argparse.Namespace, client: BlockingV2Transport) -> int:
    data = _json_input(args.input)
    request = TaskRequest(text=args.text, input=data, skill=args.skill,
                          capabilities_needed=tuple(args.capability), blocking=False)
    budget = butler_v2.decode_money(args.budget, "--budget") if args.budget else None
    raw, task = _raw_task(client, "POST", "/v2/tasks",
                          butler_v2.encode_request(request, budget=budget))
    if args.is_async:
        if args.json:
            print_json(raw)
        else:
            print(task.id)
        return 0
    print(f"task {task.id}: {task.state.value}", file=sys.stderr)
    try:
        return _follow(args, client, task)
    except KeyboardInterrupt:  # Ctrl-C: we stop following; the daemon does not stop
        print(f"butler: interrupted; task {task.id} goes on. Follow it with: butler tasks "
              f"watch {args.url} {task.id}  (or stop it: butler tasks cancel {args.url} "
              f"{task.id})", file=sys.stderr)
        raise


def _follow(args: argparse.Namespace, client: BlockingV2Transport, task: Task) -> int:
    for name, payload in client.events(task.id):
        if name == "status":
            print(f"  {payload['state']}: {payload['status'].get('message', '')}"
                  f"{asked_by(payload)}", file=sys.stderr)
            if payload["state"] in (TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED):
                # Waiting on us: following on would never end.
                print(f"task {task.id} waits for an answer; reply with: butler tasks answer "
                      f"{args.url} {task.id} TEXT", file=sys.stderr)
                break
        elif name == "artifact":
            print(f"  artifact {payload['artifact'].get('name', '')}", file=sys.stderr)
    raw, final = _raw_task(client, "GET", _task_path(task.id))
    if args.json:
        print_json(raw)
    else:
        print_task(final)
    return 0 if final.state.value == "completed" else 1


def _list(args: argparse.Namespace, client: BlockingV2Transport) -> int:
    query = {"limit": str(args.limit), "state": args.state, "context_id": args.context,
             "cursor": args.cursor}
    data = client.request(
        "GET", "/v2/tasks?" + urlencode({k: v for k, v in query.items() if v is not None}))
    if not isinstance(data, dict):
        raise DelegationFailed("peer_error", f"{client.name} sent an invalid task list")
    if args.json:
        print_json(data)
        return 0
    tasks = [butler_v2.decode_task(item) for item in data.get("tasks", [])]
    width = max((len(task.id) for task in tasks), default=2)
    print_task_header(width)
    for task in tasks:
        print_task_line(task, width)
    if data.get("next_cursor"):
        print(f"more: add --cursor {data['next_cursor']}", file=sys.stderr)
    return 0


def _answer(args: argparse.Namespace, client: BlockingV2Transport) -> int:
    body = butler_v2.encode_request(TaskRequest(text=args.text, input=_json_input(args.input)))
    raw, task = _raw_task(client, "POST", _task_path(args.task_id, "input"), body)
    if args.json:
        print_json(raw)
    else:
        print_task(task)
    return 0 if task.state is not TaskState.FAILED else 1


def _get(args: argparse.Namespace, client: BlockingV2Transport) -> int:
    raw, task = _raw_task(client, "GET", _task_path(args.task_id))
    if args.json:
        print_json(raw)
    else:
        print_task(task)
    return 0


def _cancel(args: argparse.Namespace, client: BlockingV2Transport) -> int:
    raw, task = _raw_task(client, "POST", _task_path(args.task_id, "cancel"))
    if args.json:
        print_json(raw)
    else:
        print(f"task {task.id}: {task.state.value}")
    return 0


def _watch(args: argparse.Namespace, client: BlockingV2Transport) -> int:
    """Exits 0 when the task completed, 1 when it ended otherwise (or the stream did)."""
    state = ""
    for name, payload in client.events(args.task_id):
        if name == "status":
            state = str(payload.get("state", ""))
        if args.json:
            print(json.dumps({"event": name, "data": payload}, default=str), flush=True)
        elif name == "status":
            print(f"{payload['updated_at']} {payload['state']}: "
                  f"{payload['status'].get('message', '')}{asked_by(payload)}", flush=True)
        else:
            print(f"artifact: {json.dumps(payload['artifact'], default=str)}", flush=True)
    return 0 if state == TaskState.COMPLETED.value else 1
