"""A failed delegation says what happened (docs/delegation.md#troubleshooting): a machine
that does not accept the connection is not a peer slow to answer; refused connections, names
that do not resolve and the peer's own errors are named as such, with the time it took,
and the peer's name once. The troubleshooting table lists every code a delegation can
fail with."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import re
import socket
from collections.abc import Iterator

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from butler.delegation.wiring import make_delegator
from butler.engine.run import TaskRun
from internal.protocol.a2a.model import ERROR_TABLE
from tests.delegation_support import a2a_card, butler_with_peer, free_port, serving
from tests.sdk_agent import sdk_agent
from tests.support import REPO, Swarm, new_pair, post_task

NEEDS_GRPC = pytest.mark.skipif(importlib.util.find_spec("grpc") is None,
                                reason="gRPC needs the grpc extra (pip install 'butler-a2a[grpc]')")


@contextlib.contextmanager
def unanswering_port() -> Iterator[int]:
    """A port whose listener's queue is full: a new connection's SYN goes unanswered, as
    with a machine that is off the network."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    try:
        yield port
    finally:
        for sock in (*fillers, server):
            sock.close()


async def test_a_machine_that_does_not_answer_the_connection_is_named_with_the_time(
        swarm: Swarm) -> None:
    token, _ = new_pair()
    with unanswering_port() as port:
        home = await butler_with_peer(swarm, f"http://127.0.0.1:{port}", token,
                                      protocol="butler", connect_timeout_seconds=0.3)
        _, task = await post_task(home, {"task": "hi", "capabilities_needed": ["shout"]})
    error = task["error"]
    assert task["state"] == "failed" and error["code"] == "peer_timeout", task
    found = re.fullmatch(r"shouter did not accept a connection within ([0-9.]+) s, its connect "
                         r"timeout \(connect_timeout_seconds\): it is off the network, or a "
                         r"firewall drops the packets", error["message"])
    assert found, error["message"]
    assert float(found[1]) >= 0.25  # the real time, not the 60 s the whole call had


async def test_a_refused_connection_says_so(swarm: Swarm) -> None:
    token, _ = new_pair()
    home = await butler_with_peer(swarm, f"http://127.0.0.1:{free_port()}", token,
                                  protocol="butler")
    _, task = await post_task(home, {"task": "hi", "capabilities_needed": ["shout"]})
    assert task["error"]["code"] == "peer_unreachable", task
    assert task["error"]["message"].startswith("cannot connect to shouter: connection "
                                               "refused"), task["error"]


class NoSuchName(AbstractResolver):
    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    async def close(self) -> None:
        return None


async def test_a_name_that_does_not_resolve_says_so(swarm: Swarm) -> None:
    token, _ = new_pair()
    factory = functools.partial(make_delegator, names=NoSuchName)
    token_file = swarm.tmp / "peer.token"
    token_file.write_text(token)
    home = await swarm.start("home", peers=[{
        "name": "office", "url": "http://office.lan:8081", "token_file": str(token_file),
        "capabilities": ["shout"]}], daemon_kwargs={"delegator_factory": factory})
    _, task = await post_task(home, {"task": "hi", "capabilities_needed": ["shout"]})
    assert task["error"]["code"] == "peer_unreachable", task
    assert task["error"]["message"] == ("cannot connect to office: its host name does not "
                                        "resolve ([Errno -2] Name or service not known)"), task


async def test_the_peers_own_error_names_the_peer_once(swarm: Swarm) -> None:
    token, _ = new_pair()
    async with sdk_agent(token, reply="fail") as agent:
        home = await butler_with_peer(swarm, agent.url, token)
        _, task = await post_task(home, {"task": "hi", "capabilities_needed": ["shout"]})
    assert task["error"] == {"code": "peer_error", "message": "shouter: cannot shout that"}, task


def delegation_codes() -> set[str]:
    """Every code a delegation can end with: the error table's delegation errors, and the
    refusals, auth errors and overload a Butler peer answers with (passed on as they
    are), and every code the client, the delegator and a run's delegating methods raise
    or read a peer's task as."""
    codes = {code for code, spec in ERROR_TABLE.items()
             if spec.category in ("delegation", "refusal")}
    codes |= {"unauthenticated", "forbidden", "chain_mismatch", "rate_limited", "overloaded",
              "internal_error"}
    sources = [path.read_text() for path in (
        *(REPO / "internal/protocol/a2a/client").glob("*.py"),
        *(REPO / "butler/delegation").glob("*.py"),
        REPO / "internal/protocol/a2a/codec/peer_answers.py")]
    sources += [inspect.getsource(method) for method in (
        TaskRun._run_delegation, TaskRun._delegator, TaskRun._send)]
    calls = re.compile(r"(?:DelegationFailed|SkillFailed|Refusal|TaskError)\(([^,]+),")
    for text in sources:
        for args in calls.findall(text):
            codes |= set(re.findall(r'"([a-z_]+)"', args))
    return codes | {"task_timeout"}  # the delegating task's own time limit


def test_the_troubleshooting_table_lists_every_delegation_code() -> None:
    page = (REPO / "docs/delegation.md").read_text()
    table = page[page.index("## Troubleshooting"):]
    table = table[:table.index("\n## ")] if "\n## " in table else table
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    listed = {code for cell in first_cells for code in re.findall(r"`([a-z_]+)`", cell)}
    assert delegation_codes() - listed == set()
    assert "peer_unreachable" in listed and "peer_timeout" in listed


def test_codes_are_collected_from_the_code() -> None:
    """The collector finds what the client raises (a code only the code knows fails it)."""
    assert {"peer_tls_error", "peer_address_refused", "too_many_delegations",
            "rejected"} <= delegation_codes()


@NEEDS_GRPC
async def test_a_grpc_interface_nobody_listens_at_says_so(swarm: Swarm) -> None:
    """A card names a gRPC interface at a port where nothing listens."""
    closed = free_port()

    async def card(request: web.Request) -> web.Response:
        return web.json_response(a2a_card(f"127.0.0.1:{closed}", "GRPC"))

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    async with serving(app) as url:
        token, _ = new_pair()
        home = await butler_with_peer(swarm, url, token, connect_timeout_seconds=0.5)
        _, task = await post_task(home, {"task": "hi", "capabilities_needed": ["shout"]})
    assert task["error"]["code"] == "peer_unreachable", task
    assert re.fullmatch(r"cannot connect to shouter over gRPC: every attempt failed \(refused "
                        r"or unreachable\) within [0-9.]+ s", task["error"]["message"]), task
