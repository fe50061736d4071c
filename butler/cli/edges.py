"""``butler stdio`` and ``butler mcp``: the daemon on stdin/stdout instead of a port.

Both run the same engine as ``butler serve`` (``Daemon(listen=False)``), log to stderr
and stop cleanly at the end of input; they differ only in what the lines carry.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from butler.cli.serve import load_or_exit, start_or_explain
from butler.config import Config
from butler.runtime.children import watch_children_from_the_loop
from butler.telemetry.logs import setup_logging

log = logging.getLogger("butler")

STDIO_HELP = "serve A2A JSON-RPC on stdin/stdout, one request per line"
MCP_HELP = "serve the skills and the swarm as MCP tools on stdin/stdout"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, help_text, description, run in (
        ("stdio", STDIO_HELP,
         "Read A2A JSON-RPC 2.0 requests (1.0 and 0.3 methods), one per line, and write one "
         "answer per line (one per event for a stream), with the same engine and rules as "
         "`butler serve`, but no port. See docs/protocol.md, 'Over stdio'.", run_stdio),
        ("mcp", MCP_HELP,
         "An MCP server over stdio for desktop hosts and IDEs: one tool per skill that "
         "configurations.mcp_server.allowed_capabilities lets through, and `delegate`, with "
         "the same engine and swarm rules as `butler serve`, but no port. See docs/mcp.md.",
         run_mcp),
    ):
        parser = sub.add_parser(name, help=help_text, description=description + " Logs go "
                                "to stderr; at the end of input it stops and exits 0.")
        parser.add_argument("-c", "--config", default=os.environ.get("BUTLER_CONFIG"),
                            help="config file (default: $BUTLER_CONFIG)")
        parser.set_defaults(handler=_runner(run))


def _runner(run: Callable[[Config], Coroutine[Any, Any, int]]
            ) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        config = load_or_exit(args.config)
        if config is None:
            return 2
        setup_logging(config.logging)  # to stderr: stdout carries the protocol alone
        watch_children_from_the_loop()
        return asyncio.run(run(config))
    return handler


async def run_stdio(config: Config) -> int:
    import signal

    from butler.a2a_wiring import a2a_operations, jsonrpc_dispatcher
    from butler.daemon import Daemon
    from butler.delegation.wiring import make_delegator
    from butler.edges.stdio import LineLimits, StdioServer, open_stdio

    loop = asyncio.get_running_loop()
    read, out = await open_stdio(loop)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    daemon = Daemon(config, delegator_factory=make_delegator, listen=False)
    if (failed := await start_or_explain(daemon)) is not None:
        return failed
    log.info("butler %s serving A2A JSON-RPC on stdio", config.agent.id)
    ops = a2a_operations(config, daemon.engine, daemon.catalog, lambda: daemon.url, daemon.push,
                         agent=daemon.identity)
    limits = config.limits
    server = StdioServer(jsonrpc_dispatcher(config, ops), LineLimits(
        limits.max_body_bytes, limits.max_inflight, limits.shutdown_grace_seconds))
    try:
        await server.serve(read, out, stop)
    finally:
        log.info("end of input: stopping")
        await daemon.stop()
        await out.close()
    log.info("stopped")
    return 0


async def run_mcp(config: Config) -> int:
    try:
        from mcp.server.stdio import stdio_server
    except ImportError:
        print("butler: `butler mcp` needs the MCP SDK: pip install 'butler-a2a[mcp]'",
              file=sys.stderr)
        return 2

    from butler.daemon import Daemon
    from butler.delegation.wiring import make_delegator
    from butler.edges.mcp import ButlerTools, mcp_server
    from butler.edges.mcp_http import package_version

    daemon = Daemon(config, delegator_factory=make_delegator, listen=False)
    if (failed := await start_or_explain(daemon)) is not None:
        return failed
    server = mcp_server(ButlerTools(daemon.engine, daemon.catalog), config.agent.name,
                        package_version())
    log.info("butler %s serving MCP on stdio", config.agent.id)
    try:
        # stdio_server points fd 1 at stderr while it serves: stray output stays off the wire.
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        log.info("end of input: stopping")
        await daemon.stop()
    log.info("stopped")
    return 0

