"""The service files start the daemon the way it is documented: config path and secrets
from the environment, no token on any command line."""

from __future__ import annotations

import asyncio
import configparser
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.raw_http import close, get_healthz
from tests.support import REPO, Swarm, child_env, config_dict, new_pair, write_config


def test_unit_and_dockerfile_use_the_environment() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(REPO / "deploy" / "butler.service")
    service = unit["Service"]
    assert service["ExecStart"].endswith("butler serve")
    assert "BUTLER_CONFIG=" in service["Environment"]
    assert service["KillSignal"] == "SIGTERM"
    docker = (REPO / "deploy" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["butler", "serve"]' in docker
    assert "ENV BUTLER_CONFIG=" in docker
    for line in docker.splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (REPO / src).exists(), src


async def test_serve_takes_its_config_and_secrets_from_the_environment(tmp_path: Path) -> None:
    peer_token, _ = new_pair()
    cfg, _ = config_dict(tmp_path, "home", peers=[{
        "name": "office", "url": "http://127.0.0.1:9", "token_env": "BUTLER_OFFICE_TOKEN",
        "capabilities": ["x"]}])
    path = write_config(tmp_path, "home", cfg)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "butler", "serve", cwd=REPO,
        env=child_env(BUTLER_CONFIG=str(path), BUTLER_OFFICE_TOKEN=peer_token),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(20):
            line = (await proc.stdout.readline()).decode()
        assert "butler home serving on http://127.0.0.1:" in line
    finally:
        proc.terminate()
        _, err = await proc.communicate()
    assert proc.returncode == 0
    assert peer_token not in err.decode()


# -- the systemd unit, run as systemd would run it --------------------------------------

UNIT = REPO / "deploy" / "butler.service"


def _unit() -> configparser.SectionProxy:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(UNIT)
    return unit["Service"]


class NotifyListener:
    """The service manager's end of ``NOTIFY_SOCKET``: a datagram socket whose messages
    are read in order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)

    async def next(self) -> str:
        async with asyncio.timeout(20):
            data = await asyncio.get_running_loop().sock_recv(self.sock, 4096)
        return data.decode()

    async def until(self, line: str) -> list[str]:
        """Every message up to the one that holds ``line``."""
        seen = [await self.next()]
        while line not in seen[-1].splitlines():
            seen.append(await self.next())
        return seen

    def close(self) -> None:
        self.sock.close()


def _read_only(folder: Path) -> list[str]:
    """A command prefix under which ``folder`` is read-only, as ProtectSystem=strict makes
    /etc: its mode does that for a user, a read-only bind mount in a mount namespace of its
    own for root (whom modes do not stop). Empty when neither can be had here: the test
    then checks that nothing was written there."""
    folder.chmod(0o555)
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-m", "true"], check=False,
                                         capture_output=True).returncode != 0:
        return []
    return [unshare, "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"',
            str(folder)]


def test_unit_declares_readiness_reload_state_and_descriptors() -> None:
    service = _unit()
    assert service["Type"] == "notify"
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert service["StateDirectory"] == "butler"
    assert int(service["LimitNOFILE"]) >= 65536
    # ProtectSystem=strict: nothing but the state folder is writable, so no data_dir
    # beside the config.
    assert service["ProtectSystem"] == "strict"
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(UNIT)
    doc = unit["Unit"]["Documentation"]
    prefix = "file:///usr/share/doc/butler/"
    assert doc.startswith(prefix) and (REPO / "docs" / doc.removeprefix(prefix)).is_file()
    # The install steps put the docs where Documentation= points.
    assert "-t /usr/share/doc/butler docs/*.md" in UNIT.read_text()


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # The unit as installed, with ExecStart's program one that exists on this machine.
    installed = tmp_path / "butler.service"
    installed.write_text(UNIT.read_text().replace("/opt/butler/bin/butler", sys.executable))
    done = subprocess.run([analyze, "verify", str(installed)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "butler.service" not in done.stderr, done.stderr  # no warning about it either


async def test_exec_start_runs_in_the_units_sandbox() -> None:
    """ExecStart as systemd runs it: the config folder read-only, STATE_DIRECTORY the only
    writable folder, its working directory, its environment; READY=1 on NOTIFY_SOCKET
    once it serves."""
    service = _unit()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)
        etc, state = tmp / "etc", tmp / "state"
        etc.mkdir()
        state.mkdir(mode=0o700)
        token, _ = new_pair()
        cfg, tokens = config_dict(tmp, "home", peers=[{
            "name": "office", "url": "http://127.0.0.1:9", "token_env": "BUTLER_OFFICE_TOKEN",
            "capabilities": ["x"]}])
        del cfg["data_dir"]  # as the unit's comments say: the state folder is the default
        environment = dict(e.split("=", 1) for e in service["Environment"].split())
        config_path = etc / Path(environment["BUTLER_CONFIG"]).name
        config_path.write_text(yaml.safe_dump(cfg))
        config_path.chmod(0o444)
        sandbox = _read_only(etc)
        notify = NotifyListener(tmp / "notify.sock")
        program, *args = service["ExecStart"].split()
        assert program.endswith("/butler")
        env = child_env(BUTLER_CONFIG=str(config_path), STATE_DIRECTORY=str(state),
                        NOTIFY_SOCKET=str(notify.path), BUTLER_OFFICE_TOKEN=token,
                        PYTHONDONTWRITEBYTECODE="1")
        assert service["WorkingDirectory"] == "/var/lib/butler"
        proc = await asyncio.create_subprocess_exec(
            *sandbox, sys.executable, "-m", "butler", *args, cwd=state, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            ready = await notify.until("READY=1")
            assert any(m.startswith("READY=1\nSTATUS=serving on http://") for m in ready)
            assert (state / "identity_key.json").is_file()
            assert (state / "tasks.db").is_file()
            assert sorted(p.name for p in etc.iterdir()) == [config_path.name]
            assert tokens["operator"]
        finally:
            notify.close()
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            out, err = await proc.communicate()
            etc.chmod(0o755)
        assert proc.returncode == 0, err.decode()
        assert token not in err.decode() + out.decode()


async def test_sighup_reloads_tokens_and_skills_and_keeps_connections(tmp_path: Path) -> None:
    """A new token is accepted and the old one refused on a connection opened before the
    reload, a new skill is on the card; a bad config is refused and the old one kept."""
    cfg, tokens = config_dict(tmp_path, "home")
    path = write_config(tmp_path, "home", cfg)
    notify = NotifyListener(tmp_path / "notify.sock")
    log_path = tmp_path / "serve.log"
    writer: asyncio.StreamWriter | None = None
    with log_path.open("wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "butler", "serve", "-c", str(path), cwd=REPO,
            env=child_env(NOTIFY_SOCKET=str(notify.path)),
            stdout=asyncio.subprocess.PIPE, stderr=log_file)
    try:
        ready = "\n".join(await notify.until("READY=1"))
        port = int(ready.rsplit(":", 1)[1].split()[0])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        old = tokens["operator"]
        assert await get_healthz(reader, writer, "/v2/tasks", old) == 200

        new, digest = new_pair()
        cfg["configurations"]["a2a"]["token_hashes"] = [{"sha256": digest, "name": "operator"}]
        cfg["skills"] = [*cfg["skills"], {"id": "echo2", "builtin": "echo",
                                          "capabilities": ["echo2"], "expose": True}]
        write_config(tmp_path, "home", cfg)
        proc.send_signal(signal.SIGHUP)
        assert any("RELOADING=1" in m for m in await notify.until("READY=1"))
        # The same connection, opened before the reload.
        assert await get_healthz(reader, writer, "/v2/tasks", old) == 401
        assert await get_healthz(reader, writer, "/v2/tasks", new) == 200
        async with aiohttp.ClientSession() as session, \
                session.get(f"http://127.0.0.1:{port}/.well-known/agent-card.json") as resp:
            card = await resp.json()
        assert "echo2" in [s["id"] for s in card["skills"]]

        path.write_text("agent: {id: home}\nnot_a_key: 1\n")
        proc.send_signal(signal.SIGHUP)
        await notify.until("READY=1")
        assert await get_healthz(reader, writer, "/v2/tasks", new) == 200
    finally:
        if writer is not None:
            await close(writer)
        notify.close()
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await proc.communicate()
    log_text = log_path.read_text()
    assert "config reloaded from" in log_text
    assert "config reload refused, the running config is kept" in log_text
    assert "not_a_key" in log_text
    assert proc.returncode == 0


# -- Prometheus alert rules and the Grafana dashboard ----------------------------------

PROMETHEUS = REPO / "deploy" / "prometheus"
GRAFANA = REPO / "deploy" / "grafana" / "butler-dashboard.json"
METRIC = re.compile(r"\b((?:butler|process)_[a-z_]+)\b")


def test_promtool_checks_and_tests_the_alert_rules() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    for args in (["check", "rules", "butler-alerts.yml"],
                 ["test", "rules", "butler-alerts.test.yml"]):
        done = subprocess.run([promtool, *args], cwd=PROMETHEUS, capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


async def test_the_dashboard_and_the_alerts_use_only_exported_metrics(
    swarm: Swarm, http: aiohttp.ClientSession
) -> None:
    home = await swarm.start("home")
    async with http.get(f"{home.url}/metrics", headers=home.headers()) as resp:
        text = await resp.text()
    exported = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            exported |= {name} if kind != "histogram" else {
                f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    dashboard = json.loads(GRAFANA.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [r["expr"] for g in yaml.safe_load(
        (PROMETHEUS / "butler-alerts.yml").read_text())["groups"] for r in g["rules"]]
    used = {name for expr in exprs for name in METRIC.findall(expr)}
    assert used and used <= exported, used - exported
    assert {"butler_delegation_duration_seconds_bucket", "butler_tasks_running",
            "process_open_fds", "butler_build_info"} <= used
