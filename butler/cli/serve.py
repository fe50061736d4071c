"""``butler serve`` and ``butler check-config``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import sys
from typing import TYPE_CHECKING, Any

from butler.cli.json_output import error_json, json_flag, print_json
from butler.config import Config, load_config
from butler.config.weak_tokens import token_hash_warnings
from butler.runtime.children import watch_children_from_the_loop
from butler.runtime.heap import HeapKeeper, settle_heap
from butler.runtime.service_notify import READY, STOPPING, notify, reloading
from butler.skills.catalog import is_reserved
from butler.skills.plugin import PluginError, load_plugin
from butler.telemetry.logs import setup_logging
from internal.protocol.a2a.model import SetupError

if TYPE_CHECKING:
    from butler.daemon import Daemon

log = logging.getLogger("butler")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the daemon",
                           description="Serve the authenticated A2A endpoint until SIGTERM or "
                                       "SIGINT, then finish in-flight requests and exit 0.")
    serve.add_argument("-c", "--config", default=os.environ.get("BUTLER_CONFIG"),
                       help="config file (default: $BUTLER_CONFIG)")
    serve.set_defaults(handler=_serve)
    check = sub.add_parser("check-config", help="validate a config file without starting",
                           description="Exit 0 if FILE is valid; else print one line naming "
                                       "the file, the key and the problem, and exit 2.")
    check.add_argument("file", help="the YAML config file to check")
    json_flag(check, "print what was found as JSON: ok, counts, warnings or the error")
    check.set_defaults(handler=_check)


def load_or_exit(path: str | None, *, secrets: bool = True,
                 agent: str | None = None, as_json: bool = False) -> Config | None:
    """``agent``: the config of that agent the daemon hosts (``agents:``, docs/hosting.md)
    instead of the daemon's own; ``as_json``: a failure is also printed as ``--json``
    prints one."""
    try:
        return _load(path, secrets, agent)
    except SetupError as err:  # ConfigError included
        print(f"butler: {err.message}", file=sys.stderr)
        if as_json:
            print_json(error_json(err.code, err.message))
        return None


def _load(path: str | None, secrets: bool, agent: str | None) -> Config:
    if not path:
        raise SetupError("no_config", "no config file: pass -c FILE or set BUTLER_CONFIG")
    config = load_config(path, secrets=secrets)
    if agent is None:
        return config
    # Only when asked: the hosted agents' store and its imports.
    from butler.hosting.store import hosted_agent_config

    return hosted_agent_config(config, agent)


def agent_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", metavar="ID",
                   help="an agent this daemon hosts (agents:), instead of its own")


def _check(args: argparse.Namespace) -> int:
    result = check_config(args.file)
    error = result.get("error")
    for line in ([f"butler: {error['message']}"] if error else []) + [
            f"butler: {args.file}: warning: {w}" for w in result["warnings"]]:
        print(line, file=sys.stderr)
    if args.json:
        print_json(result)
    elif not error:
        hosted = f", {result['hosted_agents']} hosted agent(s)" if result["hosted_agents"] else ""
        print(f"{args.file}: ok ({result['skills']} skill(s), {result['peers']} peer(s)"
              f"{hosted})")
    return 2 if error else 0


def check_config(path: str) -> dict[str, Any]:
    """What ``check-config`` finds in the file at ``path`` (``butler doctor`` starts here):
    ``ok``, counts and warnings, or the one error that stops it."""
    result: dict[str, Any] = {"file": path, "ok": False, "warnings": []}
    try:
        config = load_config(path)
    except SetupError as err:  # ConfigError included
        return {**result, **error_json(err.code, err.message)}
    problem = serve_problem(config) or _skill_problem(config)
    if problem:
        return {**result, **error_json("invalid_config", f"{config.source}: {problem}")}
    warnings = [f"skills[{i}].id: {skill.id!r} is in a reserved namespace (a2a., butler., "
                "admin.) and is never exposed" for i, skill in enumerate(config.skills)
                if skill.expose and is_reserved(skill.id)]
    warnings += [f"skills[{i}].command: {skill.command[0]} is not an executable program "
                 "here: the skill fails with command_failed until it is installed"
                 for i, skill in enumerate(config.skills)
                 if skill.command and shutil.which(skill.command[0]) is None]
    warnings += token_hash_warnings(_token_digests(config))
    return {**result, "ok": True, "agent_id": config.agent.id, "skills": len(config.skills),
            "peers": len(config.peers), "hosted_agents": len(config.agents),
            "data_dir": str(config.data_dir), "warnings": warnings}


def _token_digests(config: Config) -> list[bytes]:
    """The hashes of the daemon's own callers and of its hosted agents' (``agents:``)."""
    return [t.digest for t in (*config.a2a.tokens, *(t for a in config.agents
                                                      for t in a.tokens))]


def _skill_problem(config: Config) -> str | None:
    """Plugins are imported here too, so a typo shows before the daemon is started."""
    skills = [(f"skills[{i}]", s) for i, s in enumerate(config.skills)]
    skills += [(f"agents[{a}].skills[{i}]", s) for a, agent in enumerate(config.agents)
               for i, s in enumerate(agent.skills)]
    for where, skill in skills:
        if skill.python is not None:
            try:
                load_plugin(skill.python)
            except PluginError as exc:
                return f"{where}.python: {exc}"
    return None


def serve_problem(config: Config) -> str | None:
    if not config.a2a.enabled:
        return "configurations.a2a.enabled: is false (the secure default); set it to true to serve"
    if not config.a2a.tokens:
        return "configurations.a2a.token_hashes: is empty, so no one could call this agent"
    return None


def _serve(args: argparse.Namespace) -> int:
    config = load_or_exit(args.config)
    if config is None:
        return 2
    problem = serve_problem(config)
    if problem:
        print(f"butler: {config.source}: {problem}", file=sys.stderr)
        return 2
    setup_logging(config.logging)
    for warning in token_hash_warnings(_token_digests(config)):
        log.warning("%s: %s", config.source, warning)
    watch_children_from_the_loop()
    return asyncio.run(run_daemon(config))


def _cannot_start(what: str) -> int:
    """One line on stderr, exit code 2: the same for every start-up failure."""
    print(f"butler: cannot start: {what}", file=sys.stderr, flush=True)
    return 2


async def start_or_explain(daemon: Daemon) -> int | None:
    """Start ``daemon``; None, or the exit code after one line saying why it could not."""
    try:
        await daemon.start()
    except PluginError as exc:
        return _cannot_start(f"{daemon.config.source}: skills: {exc}")
    except (SetupError, OSError) as exc:
        # The data folder (in use, unwritable), a database in it, or the port: the
        # message names which. Whatever had started is stopped again by now.
        return _cannot_start(str(exc))
    return None


def servable_config(path: str) -> Config:
    """The config at ``path`` as ``butler serve`` needs it, or ``SetupError`` saying why:
    what a reload (SIGHUP) reads."""
    config = load_config(path)
    problem = serve_problem(config)
    if problem:
        raise SetupError("invalid_config", f"{config.source}: {problem}")
    return config


async def run_daemon(config: Config) -> int:
    from butler.daemon import Daemon
    from butler.delegation.wiring import make_delegator

    daemon = Daemon(config, delegator_factory=make_delegator)
    # Signals are caught from the start: one that arrives while starting is acted on right
    # after, instead of killing the process half-way (SIGHUP's default).
    signals: asyncio.Queue[signal.Signals] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, signals.put_nowait, sig)
    if (failed := await start_or_explain(daemon)) is not None:
        return failed
    settle_heap()
    # Memory a burst took goes back to the OS once the daemon is quiet again.
    keeper = asyncio.create_task(HeapKeeper(daemon.load).run(), name="heap-keeper")
    print(f"butler {config.agent.id} serving on {daemon.url}", flush=True)
    # Every agent it hosts is served by now: systemd (Type=notify) may start what needs it.
    notify(f"{READY}\nSTATUS=serving on {daemon.url}")
    while await signals.get() == signal.SIGHUP:
        notify(reloading())
        await daemon.reload(lambda: servable_config(config.source))
        notify(READY)
    notify(STOPPING)
    keeper.cancel()
    log.info("shutting down: finishing in-flight requests")
    await daemon.stop()
    log.info("stopped")
    return 0
