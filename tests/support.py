"""Helpers for tests: real daemons on 127.0.0.1 port 0 with real SQLite files."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import os
import secrets
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, overload

import aiohttp
import yaml

from butler.config import Config, load_config
from butler.daemon import Daemon
from internal.http import hash_token
from internal.protocol.a2a.client import V2Transport

T = TypeVar("T")
POLL_SECONDS = 0.02

ECHO = {"id": "echo", "builtin": "echo", "capabilities": ["echo"], "expose": True}


def new_pair() -> tuple[str, str]:
    token = secrets.token_hex(32)
    return token, hash_token(token)


@dataclass
class Instance:
    """A running daemon plus the tokens that may call it."""

    daemon: Daemon
    tokens: dict[str, str]  # identity name -> token
    config_path: Path
    session: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return self.daemon.url

    @property
    def agent_id(self) -> str:
        return self.daemon.config.agent.id

    def client(self, who: str = "operator") -> V2Transport:
        return V2Transport(self.url, self.tokens[who], session=self.session, name=self.agent_id)

    def headers(self, who: str = "operator") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


def config_dict(
    tmp: Path, agent_id: str, *, callers: dict[str, dict[str, Any]] | None = None,
    skills: list[dict[str, Any]] | None = None, peers: list[dict[str, Any]] | None = None,
    swarm: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
    configurations: dict[str, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """A config for ``agent_id``; ``callers`` maps identity -> {tier, bound, limits} options.

    ``configurations`` adds sections (``mcp_server``) or keys of a section (``a2a``).

    Returns the config and the plain tokens of each caller identity.
    """
    callers = callers if callers is not None else {"operator": {}}
    tokens: dict[str, str] = {}
    hashes = []
    for name, opts in callers.items():
        token, digest = new_pair()
        tokens[name] = token
        entry: dict[str, Any] = {"sha256": digest}
        if opts.get("bound", True):
            entry["name"] = name
        if "tier" in opts:
            entry["tier"] = opts["tier"]
        if "limits" in opts:
            entry["limits"] = opts["limits"]
        hashes.append(entry if len(entry) > 1 else digest)
    cfg: dict[str, Any] = {
        "agent": {"id": agent_id, "name": f"{agent_id} butler"},
        "data_dir": str(tmp / agent_id),
        "configurations": {
            "a2a": {"enabled": True, "port": 0, "bind_address": "127.0.0.1",
                    "token_hashes": hashes},
            "swarm": {"enabled": True, "max_depth": 4, "budget_usd": "5.00", **(swarm or {})},
        },
        "skills": skills if skills is not None else [ECHO],
        "peers": peers or [],
    }
    for section, values in (configurations or {}).items():
        cfg["configurations"].setdefault(section, {}).update(values)
    for key, value in (extra or {}).items():
        cfg[key] = value
    return cfg, tokens


def write_config(tmp: Path, name: str, cfg: dict[str, Any]) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


async def start_instance(
    tmp: Path, session: aiohttp.ClientSession, cfg: dict[str, Any], tokens: dict[str, str],
    **daemon_kwargs: Any,
) -> Instance:
    from butler.delegation.wiring import make_delegator

    path = write_config(tmp, cfg["agent"]["id"], cfg)
    config: Config = load_config(path)
    daemon_kwargs.setdefault("delegator_factory", make_delegator)
    daemon = Daemon(config, **daemon_kwargs)
    await daemon.start()
    return Instance(daemon, tokens, path, session)


@dataclass
class Swarm:
    """Several instances; stopped in reverse order at teardown."""

    tmp: Path
    session: aiohttp.ClientSession
    instances: list[Instance] = field(default_factory=list)

    async def start(self, agent_id: str, **kwargs: Any) -> Instance:
        daemon_kwargs = kwargs.pop("daemon_kwargs", {})
        cfg, tokens = config_dict(self.tmp, agent_id, **kwargs)
        inst = await start_instance(self.tmp, self.session, cfg, tokens, **daemon_kwargs)
        self.instances.append(inst)
        return inst

    async def stop(self, inst: Instance) -> None:
        await inst.daemon.stop()
        self.instances.remove(inst)

    async def close(self) -> None:
        for inst in reversed(self.instances):
            await inst.daemon.stop()
        self.instances.clear()


# --- tasks and skills: HTTP helpers, polling, subprocess daemons and CLI -------------

TERMINAL = frozenset({"completed", "failed", "canceled", "rejected"})
REPO = Path(__file__).resolve().parent.parent


def plugin_skill(skill_id: str, ref: str, **extra: Any) -> dict[str, Any]:
    return {"id": skill_id, "python": ref, "expose": True, **extra}


def sample_skills() -> list[dict[str, Any]]:
    """Echo plus the sample plugins that report steps and that fail: what the CLI tests drive."""
    return [ECHO, plugin_skill("steps", "tests.plugins.sample:steps"),
            plugin_skill("fail", "tests.plugins.sample:fail")]


def command_skill(skill_id: str, argv: list[str], **extra: Any) -> dict[str, Any]:
    return {"id": skill_id, "command": argv, "expose": True, **extra}


def gated_skill(skill_id: str, gate: Path, **extra: Any) -> dict[str, Any]:
    """A command skill that runs until the test creates the file ``gate``, then prints
    "released": a task held in flight for as long as the test needs, not for a guessed time."""
    script = f"while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.05; done; echo released"
    return command_skill(skill_id, ["sh", "-c", script], **extra)


async def call(
    inst: Instance, method: str, path: str, *, who: str = "operator", body: Any = None,
) -> tuple[int, Any]:
    """One request to ``inst`` as ``who``: (HTTP status, decoded JSON body)."""
    async with inst.session.request(method, inst.url + path, json=body,
                                    headers=inst.headers(who)) as resp:
        return resp.status, await resp.json()


async def post_task(inst: Instance, body: dict[str, Any], *,
                    who: str = "operator") -> tuple[int, dict[str, Any]]:
    status, data = await call(inst, "POST", "/v2/tasks", who=who, body=body)
    assert isinstance(data, dict)
    return status, data


@overload
async def wait_until(predicate: Callable[[], Awaitable[T | None]], timeout: float = ...,
                     what: str = "") -> T: ...
@overload
async def wait_until(predicate: Callable[[], T | None], timeout: float = ...,
                     what: str = "") -> T: ...
async def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "") -> Any:
    """Calls ``predicate`` (plain or async) until it returns a true value, and returns that
    value; fails the test if none comes within ``timeout`` seconds.

    The one way tests wait for something another task or process does: the poll's pace is
    never part of what a test asserts, and ``timeout`` only bounds a hang."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                value = predicate()
                if inspect.isawaitable(value):
                    value = await value
                if value:
                    return value
                await asyncio.sleep(POLL_SECONDS)
    except TimeoutError:
        raise AssertionError(f"not within {timeout} s: {what or predicate}") from None


async def wait_task(inst: Instance, task_id: str, states: frozenset[str] | set[str] = TERMINAL,
                    *, who: str = "operator", message: str | None = None,
                    timeout: float = 10.0) -> dict[str, Any]:
    """Poll GET /v2/tasks/{id} until its state is in ``states`` (and shows ``message``)."""

    async def arrived() -> dict[str, Any] | None:
        status, task = await call(inst, "GET", f"/v2/tasks/{task_id}", who=who)
        assert status == 200, task
        if task["state"] in states and (message is None
                                        or task["status"]["message"] == message):
            return dict(task)
        return None

    task: dict[str, Any] = await wait_until(arrived, timeout)
    return task


@contextlib.contextmanager
def left_for_the_collector() -> Iterator[list[object]]:
    """The objects that what runs in the block leaves in reference cycles, which only the
    cycle collector frees (filled in when the block ends): what it kept alive past its
    use, and made a collection pause the loop for."""
    left: list[object] = []
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # collections in the block keep what they find, too
    try:
        yield left
    finally:
        gc.collect()
        gc.set_debug(0)
        left.extend(gc.garbage)
        gc.garbage.clear()


def process_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (exited, or a zombie nobody reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # reaped before, or while, it was read
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


async def wait_gone(pid: int, timeout: float = 5.0) -> None:
    await wait_until(lambda: process_gone(pid), timeout)


def kill_quietly(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


@dataclass
class ServeProcess:
    """``python -m butler serve -c FILE`` as a real child process."""

    proc: asyncio.subprocess.Process
    url: str
    log_path: Path

    @classmethod
    async def start(cls, config_path: Path, log_path: Path,
                    **env: str) -> ServeProcess:
        """``env``: variables set for the daemon on top of this process's."""
        with log_path.open("ab") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "butler", "serve", "-c", str(config_path),
                stdout=asyncio.subprocess.PIPE, stderr=log, cwd=REPO, env=child_env(**env),
            )
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(20):
                line = (await proc.stdout.readline()).decode()
        except BaseException:
            proc.kill()
            await proc.wait()
            raise
        if " serving on " not in line:
            proc.kill()
            await proc.wait()
            raise AssertionError(f"daemon did not start: {line!r}\n{log_path.read_text()}")
        return cls(proc, line.rsplit(" ", 1)[1].strip(), log_path)

    async def kill9(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(15):
                    await self.proc.wait()
            except TimeoutError:
                await self.kill9()
        return await self.proc.wait()


async def run_cli(*args: str, token: str = "", timeout: float = 30.0) -> tuple[int, str, str]:
    """``python -m butler ARGS`` with BUTLER_TOKEN set: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "butler", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=REPO, env=child_env(BUTLER_TOKEN=token),
    )
    try:
        async with asyncio.timeout(timeout):
            out, err = await proc.communicate()
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
