"""``butler doctor``: a config checked end to end, each finding with what to do about it.

The config (as ``check-config``), its files and their permissions, the data folder (and
whether a daemon holds it), the ports, each peer (its card reachable, signed by the key
pinned for it, its token accepted), the registry, and the clock against the peers' and
the registry's. It changes nothing: no folder is made, no key pinned, no task sent. A
peer's token is sent only to a peer whose card passed the key check, as delegation does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email.utils
import fcntl
import os
import socket
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from butler.cli.json_output import json_flag, print_json
from butler.cli.serve import check_config
from butler.config import Config, load_config
from butler.delegation.peer_identity import PINS_FILE, PinStore
from butler.identity.key_file import KEY_FILE
from butler.storage.data_folder import LOCK_FILE
from internal.http import CONFIGURED, OutboundGuard, outbound_session
from internal.protocol.a2a.client import A2AClient
from internal.protocol.a2a.codec.card_signature import key_rotations, verify_card
from internal.protocol.a2a.model import ButlerError, agent_key
from internal.signing import BadSignature, rotated_to

SECONDS = 10.0
CLOCK_SKEW_SECONDS = 30.0  # receipts and registry leases carry times; more is trouble
OK, WARNING, PROBLEM = "ok", "warning", "problem"


@dataclass
class Finding:
    check: str
    status: str
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "status": self.status, "detail": self.detail,
                "fix": self.fix or None}


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("doctor", help="check a config end to end and say what to fix",
                       description="Checks the config, its files and permissions, the data "
                                   "folder, the ports, the peers (reachable, pinned keys, "
                                   "tokens), the registry and the clock. Exit 0 when nothing "
                                   "is a problem, 1 when something is.")
    p.add_argument("-c", "--config", default=os.environ.get("BUTLER_CONFIG"), metavar="FILE",
                   help="the daemon's config (default $BUTLER_CONFIG)")
    json_flag(p, "print the findings as a JSON list")
    p.set_defaults(handler=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    if not args.config:
        print("butler: no config file: pass -c FILE or set BUTLER_CONFIG", file=sys.stderr)
        return 2
    findings = asyncio.run(examine(args.config))
    if args.json:
        print_json({"config": args.config, "ok": all(f.status != PROBLEM for f in findings),
                    "findings": [f.to_json() for f in findings]})
    else:
        for f in findings:
            print(f"{f.status.upper():<8} {f.check}: {f.detail}")
            if f.fix:
                print(f"         fix: {f.fix}")
    return 1 if any(f.status == PROBLEM for f in findings) else 0


async def examine(path: str) -> list[Finding]:
    checked = check_config(path)
    if not checked["ok"]:
        return [Finding("config", PROBLEM, checked["error"]["message"],
                        "edit the key it names; `butler check-config FILE` checks again")]
    config = load_config(path)
    findings = [Finding("config", OK, f"{checked['skills']} skill(s), {checked['peers']} "
                                      f"peer(s)")]
    findings += [Finding("config", WARNING, w) for w in checked["warnings"]]
    findings += _files(config)
    findings += _data_folder(config)
    findings += await _ports(config)
    guard = OutboundGuard(CONFIGURED)
    async with outbound_session(guard) as session:
        clocks: list[float] = []
        for peer in config.peers:
            findings += await _peer(config, peer.name, session, guard, clocks)
        if config.registry.url:
            findings.append(await _registry(config.registry.url, config.registry.token,
                                            session, clocks))
    findings.append(_clock(clocks))
    return findings


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _files(config: Config) -> list[Finding]:
    out = []
    source = Path(config.source)
    if _mode(source) & 0o002:
        out.append(Finding("files", PROBLEM, f"{source} is writable by every user",
                           f"chmod o-w {source}"))
    secrets = [config.a2a.tls.key_file] if config.a2a.tls is not None else []
    for secret in secrets:
        if _mode(secret) & 0o077:
            out.append(Finding("files", WARNING, f"{secret} is readable by others",
                               f"chmod 600 {secret}"))
    return out or [Finding("files", OK, f"{source} and the files it names")]


def _data_folder(config: Config) -> list[Finding]:
    folder = config.data_dir
    if not folder.exists():
        parent = next(p for p in folder.parents if p.exists())
        if not os.access(parent, os.W_OK):
            return [Finding("data folder", PROBLEM, f"{folder} does not exist and {parent} is "
                            "not writable, so the daemon cannot make it",
                            "set data_dir to a writable folder, or run it under the unit "
                            "(StateDirectory=)")]
        return [Finding("data folder", OK, f"{folder} is made on the first start")]
    out = []
    if not os.access(folder, os.W_OK):
        out.append(Finding("data folder", PROBLEM, f"{folder} is not writable by this user",
                           "run as its owner, or chown it to the daemon's user"))
    if _mode(folder) & 0o077:
        out.append(Finding("data folder", WARNING, f"{folder} is open to other users "
                           f"({oct(_mode(folder))})", f"chmod 700 {folder}"))
    holder = _lock_holder(folder / LOCK_FILE)
    if holder is not None:
        out.append(Finding("data folder", OK, f"{folder} is in use by a running butler "
                           f"({holder})"))
    key = folder / KEY_FILE
    if key.exists():
        out.append(Finding("identity key", OK, f"{key}: back it up; peers pin it, and a new "
                           "one makes them refuse this agent (peer_identity_changed)"))
    else:
        out.append(Finding("identity key", OK, f"{key} is made on the first start"))
    return out or [Finding("data folder", OK, str(folder))]


def _lock_holder(lock: Path) -> str | None:
    """Who holds the data folder's lock (a running daemon), without taking it for long."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return f"pid {pid}" if pid else "pid unknown"
    finally:
        os.close(fd)
    return None


async def _ports(config: Config) -> list[Finding]:
    a2a = config.a2a
    wanted: list[tuple[str, str, int]] = [("A2A port", a2a.bind_address, a2a.port)]
    if a2a.grpc_port:
        wanted.append(("gRPC port", a2a.bind_address, a2a.grpc_port))
    if config.metrics.enabled and config.metrics.listen:
        metrics_host, _, metrics_port = config.metrics.listen.rpartition(":")
        wanted.append(("metrics port", metrics_host.strip("[]"), int(metrics_port)))
    out = []
    for name, host, port in wanted:
        if port == 0:
            out.append(Finding(name, OK, "0: any free port"))
            continue
        try:
            with socket.create_server((host, port)):
                pass
        except PermissionError:
            out.append(Finding(name, PROBLEM, f"{host}:{port} needs privileges to bind",
                               "use a port above 1023"))
        except OSError as exc:
            answer = await _healthz(f"http://{host}:{port}") if name == "A2A port" else None
            if answer is not None and answer.get("agent_id") == config.agent.id:
                out.append(Finding(name, OK, f"{host}:{port}: {config.agent.id} is serving"))
            else:
                out.append(Finding(name, PROBLEM, f"{host}:{port} is taken ({exc.strerror})",
                                   "stop what holds it, or change the port in the config"))
        else:
            out.append(Finding(name, OK, f"{host}:{port} is free"))
    return out


async def _healthz(url: str) -> dict[str, Any] | None:
    with contextlib.suppress(Exception):
        async with aiohttp.ClientSession() as session, session.get(
                f"{url}/healthz", timeout=aiohttp.ClientTimeout(total=1.5)) as resp:
            data = await resp.json()
            return data if isinstance(data, dict) else None
    return None


async def _peer(config: Config, name: str, session: aiohttp.ClientSession,
                guard: OutboundGuard, clocks: list[float]) -> list[Finding]:
    peer = next(p for p in config.peers if p.name == name)
    check = f"peer {name}"
    client = A2AClient(peer.url, "", session=session, name=name, guard=guard,
                       connect_timeout=peer.connect_timeout_seconds, timeout=SECONDS)
    try:
        card = await client.card(time.monotonic() + SECONDS)
    except ButlerError as err:
        return [Finding(check, PROBLEM, f"{peer.url}: {err.code}: {err.message}",
                        "is it running and reachable from here (its bind_address, agent.url, "
                        "a firewall: 8081/tcp)?")]
    out = [Finding(check, OK, f"{peer.url} answers with its card")]
    pinned = PinStore(config.data_dir / PINS_FILE).get(agent_key(name))
    trusted = True
    if card.get("signatures"):
        try:
            key = verify_card(card)
        except BadSignature as exc:
            return [*out, Finding(check, PROBLEM, f"its card's signature does not check: {exc}",
                                  "ask its operator; do not send it a token")]
        if pinned is None:
            out.append(Finding(check, OK, f"key {key.kid} (pinned at the first delegation)"))
        elif key.kid == pinned.kid or rotated_to(pinned, key.kid, key_rotations(card)):
            out.append(Finding(check, OK, f"signed by its pinned key {pinned.kid}"))
        else:
            trusted = False
            out.append(Finding(check, PROBLEM, f"its card is signed by key {key.kid}, but "
                               f"{pinned.kid} is pinned: delegation refuses it "
                               "(peer_identity_changed)",
                               f"if {name} was reinstalled on purpose, remove "
                               f"\"{agent_key(name)}\" from {config.data_dir / PINS_FILE}; "
                               "else find out why"))
    elif pinned is not None:
        trusted = False
        out.append(Finding(check, PROBLEM, f"its card is unsigned but key {pinned.kid} is pinned",
                           f"remove \"{agent_key(name)}\" from {config.data_dir / PINS_FILE} "
                           "only if you know why it changed"))
    if trusted and peer.protocol == "butler":
        out.append(await _token(peer.url, peer.token, name, session, clocks))
    return out


async def _token(url: str, token: str, name: str, session: aiohttp.ClientSession,
                 clocks: list[float]) -> Finding:
    try:
        async with session.get(f"{url.rstrip('/')}/v2/tasks?limit=1",
                               headers={"Authorization": f"Bearer {token}"},
                               timeout=aiohttp.ClientTimeout(total=SECONDS)) as resp:
            _note_clock(resp.headers.get("Date"), clocks)
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Finding(f"peer {name}", PROBLEM, f"the token check failed: {exc}")
    if status == 401:
        return Finding(f"peer {name}", PROBLEM, "it refuses this config's token for it",
                       f"ask {name}'s operator to add its hash (`butler token hash`) to "
                       "their token_hashes, or set the right token in your token_env")
    return Finding(f"peer {name}", OK, f"accepts the token (HTTP {status})")


async def _registry(url: str, token: str, session: aiohttp.ClientSession,
                    clocks: list[float]) -> Finding:
    """Its health, then (with the config's registry token) whether it accepts the token."""
    base = url.rstrip("/")
    try:
        async with session.get(f"{base}/healthz",
                               timeout=aiohttp.ClientTimeout(total=SECONDS)) as resp:
            _note_clock(resp.headers.get("Date"), clocks)
            if resp.status != 200:
                return Finding("registry", PROBLEM, f"{url}/healthz answered HTTP {resp.status}")
        if token:
            async with session.get(f"{base}/v1/agents?limit=1",
                                   headers={"Authorization": f"Bearer {token}"},
                                   timeout=aiohttp.ClientTimeout(total=SECONDS)) as resp:
                if resp.status == 401:
                    return Finding("registry", PROBLEM, f"{url} refuses this config's token",
                                   "ask the registry's operator for a token it accepts "
                                   "(configurations.registry.token_env)")
    except (aiohttp.ClientError, ButlerError, TimeoutError) as exc:
        return Finding("registry", PROBLEM, f"{url}: {exc}",
                       "is `butler registry serve` running there and reachable?")
    return Finding("registry", OK, f"{url} answers" + (" and accepts the token" if token else ""))


def _note_clock(date: str | None, clocks: list[float]) -> None:
    with contextlib.suppress(TypeError, ValueError):
        if date:
            clocks.append(email.utils.parsedate_to_datetime(date).timestamp() - time.time())


def _clock(clocks: list[float]) -> Finding:
    if not clocks:
        return Finding("clock", OK, "no peer or registry to compare with")
    worst = max(clocks, key=abs)
    if abs(worst) > CLOCK_SKEW_SECONDS:
        return Finding("clock", PROBLEM, f"{worst:+.0f} s from a peer's or the registry's",
                       "run NTP (systemd-timesyncd or chrony) on both machines")
    return Finding("clock", OK, f"within {abs(worst):.0f} s of its peers' and registry's")
