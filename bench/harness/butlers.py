"""Butler instances for the bench: generated configs (like ``butler demo``), started as
``python -m butler serve`` subprocesses with data on disk and bearer tokens on."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.procs import Server, free_port, start
from internal.http import hash_token, new_token

CAPABILITY = "bench.echo"
ECHO_SKILL = {"id": "echo", "builtin": "echo", "capabilities": [CAPABILITY], "expose": True,
              "description": "echoes the task back"}


@dataclass
class Butler:
    server: Server
    token: str  # the operator's token

    @property
    def url(self) -> str:
        return self.server.url


def _config(agent_id: str, work: Path, port: int, accept: dict[str, str],
            skills: list[dict[str, Any]], peers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "agent": {"id": agent_id, "name": f"Bench {agent_id}",
                  "description": "benchmark instance"},
        "data_dir": str(work / f"{agent_id}-data"),
        "configurations": {
            "a2a": {"enabled": True, "port": port, "bind_address": "127.0.0.1",
                    "token_hashes": [{"sha256": hash_token(tok), "name": name}
                                     for name, tok in accept.items()]},
            "swarm": {"enabled": True, "max_depth": 8, "budget_usd": "1.00"},
        },
        "logging": {"level": "warning"},
        # The bench measures capacity: one operator token would otherwise be held to the
        # default per-caller rate (200/s). The limiter still runs; it just never refuses.
        "rate_limits": {"per_caller_per_second": 0, "per_address_per_second": 0,
                        "max_inflight_tasks_per_caller": 0},
        "skills": skills,
        "peers": peers,
    }


def _serve(agent_id: str, cfg: dict[str, Any], work: Path, cpu: str | None) -> Server:
    path = work / f"{agent_id}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return start(agent_id, [sys.executable, "-m", "butler", "serve", "-c", str(path)],
                 work / f"{agent_id}.log", cpu)


def start_single(work: Path, cpu: str | None, agent_id: str = "bench") -> Butler:
    """One instance with the echo skill; the operator's token is accepted."""
    token = new_token()
    cfg = _config(agent_id, work, 0, {"operator": token}, [ECHO_SKILL], [])
    return Butler(_serve(agent_id, cfg, work, cpu), token)


def start_chain(work: Path, length: int, cpu: str | None) -> list[Butler]:
    """``length`` instances: hop i delegates ``bench.echo`` to hop i+1; only the last
    has the skill. Returns them first to last; call the first with the operator token."""
    ids = [f"hop{i + 1}-of-{length}" for i in range(length)]
    ports = [free_port() for _ in ids]
    operator = new_token()
    link_tokens = [new_token() for _ in ids]  # link_tokens[i]: hop i -> hop i+1
    butlers: list[Butler] = []
    try:
        # Start from the end so every peer already listens when its caller starts.
        for i in reversed(range(length)):
            accept = {"operator": operator}
            if i > 0:
                accept[ids[i - 1]] = link_tokens[i - 1]
            peers: list[dict[str, Any]] = []
            if i < length - 1:
                token_file = work / f"{ids[i]}-to-next.token"
                token_file.write_text(link_tokens[i])
                peers.append({"name": ids[i + 1], "url": f"http://127.0.0.1:{ports[i + 1]}",
                              "token_file": str(token_file), "capabilities": [CAPABILITY]})
            skills = [ECHO_SKILL] if i == length - 1 else []
            cfg = _config(ids[i], work, ports[i], accept, skills, peers)
            butlers.insert(0, Butler(_serve(ids[i], cfg, work, cpu), operator))
    except BaseException:
        for b in butlers:
            b.server.stop()
        raise
    return butlers


def v2_body(text: str = "hello {n}") -> str:
    """The /v2/tasks body: a blocking echo task that needs ``bench.echo``."""
    return ('{"task":"' + text + '","capabilities_needed":["' + CAPABILITY
            + '"],"mode":"blocking"}')
