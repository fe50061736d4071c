"""The README's main job and the shipped example configs keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from butler.config import load_config
from tests.support import post_task

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("name", "env"), [
    ("examples/home.yaml", {"BUTLER_OFFICE_TOKEN": "t"}),
    ("examples/office.yaml", {"BUTLER_HOME_TOKEN": "t"}),
    ("config.example.yaml", {}),
])
def test_shipped_configs_are_valid(name: str, env: dict[str, str]) -> None:
    config = load_config(ROOT / name, env=env)
    assert config.a2a.enabled


def test_demo_delegates_between_two_real_instances() -> None:
    proc = subprocess.run([sys.executable, "-m", "butler", "demo"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "delegation round trip OK" in proc.stdout
    assert "office / memory.write: 0.02 USD" in proc.stdout
    assert "trace id: " in proc.stdout
    assert "The office printer's PIN is 4711" in proc.stdout
    assert "finds office through the registry" in proc.stdout
    assert "office / memory.search: 0.005 USD" in proc.stdout
    # Step 4: plain words, routed by home's intent router to office's card skill.
    assert "chosen: office/office.action_items" in proc.stdout
    assert "'action' in name/tags/id" in proc.stdout
    assert "office / office.action_items: 0.005 USD" in proc.stdout
    # Step 5: each safety rule refused, one line each, with who refused and what it cost.
    lines = proc.stdout.splitlines()
    assert ("  loop: the caller chain already holds home -> loop_detected: home refused it, "
            "no task was created") in lines
    assert ("  depth: the task already passed through 5 agents, home's max_depth is 4 -> "
            "depth_exceeded: home refused it, no task was created") in lines
    assert ("  budget: memory.write costs 0.02 USD at office, the caller gives 0.01 USD -> "
            "budget_exhausted: office refused it, the task failed, 0 USD spent") in lines


def test_delegate_cli_shows_hops_and_trace(tmp_path: Path) -> None:
    import yaml

    from tests.delegation_support import free_port
    from tests.support import config_dict, write_config

    port = free_port()
    office_cfg, office_tokens = config_dict(tmp_path, "office", callers={"home": {}})
    office_cfg["configurations"]["a2a"]["port"] = port
    office_path = write_config(tmp_path, "office", office_cfg)
    home_cfg, _ = config_dict(tmp_path, "home", peers=[{
        "name": "office", "url": f"http://127.0.0.1:{port}", "token_env": "OFFICE_TOKEN",
        "capabilities": ["echo"]}])
    home_path = write_config(tmp_path, "home", home_cfg)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OFFICE_TOKEN": office_tokens["home"]}
    office = subprocess.Popen([sys.executable, "-m", "butler", "serve", "-c", str(office_path)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, env=env)
    try:
        assert office.stdout is not None
        assert "serving on" in office.stdout.readline()
        out = subprocess.run(
            [sys.executable, "-m", "butler", "delegate", "-c", str(home_path), "--peer", "office",
             "--capability", "echo", "hello office"],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "result: hello office" in out.stdout
        assert "office / echo" in out.stdout
        assert "trace id:" in out.stdout
        assert yaml.safe_load(home_path.read_text())["agent"]["id"] == "home"
    finally:
        office.terminate()
        office.wait(timeout=20)
        if office.stdout is not None:
            office.stdout.close()


async def test_the_seed_phrase_reaches_office_with_the_shipped_examples(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """docs/lan.md's configs, moved to loopback: home routes the README's plain words to
    office's action-items skill, and the print skill's program is shipped beside them."""
    import yaml

    from tests.support import new_pair, start_instance, wait_task

    pairs = {who: new_pair() for who in ("home", "office", "me")}

    def local(name: str, caller: str, peer_url: str) -> dict[str, Any]:
        cfg: dict[str, Any] = yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
        cfg["agent"].pop("url")
        cfg["data_dir"] = str(tmp_path / name)
        a2a = cfg["configurations"]["a2a"]
        a2a.update(bind_address="127.0.0.1", port=0, token_hashes=[
            {"sha256": pairs[caller][1], "name": caller},
            {"sha256": pairs["me"][1], "name": "me", "tier": "admin"}])
        token_file = tmp_path / f"{name}-to-{caller}.token"
        token_file.write_text(pairs[name][0])
        peer = cfg["peers"][0]
        peer.pop("token_env")
        peer.update(url=peer_url, token_file=str(token_file))
        return cfg

    office = await start_instance(tmp_path, http, local("office", "home", "http://127.0.0.1:9"),
                                  {"operator": pairs["me"][0]})
    home = await start_instance(tmp_path, http, local("home", "office", office.url),
                                {"operator": pairs["me"][0]})
    try:
        status, task = await post_task(
            home, {"task": "check with my office Butler for any pending action items",
                   "mode": "async"})
        assert status == 202, task
        done = await wait_task(home, task["id"])
        assert done["state"] == "completed", done
        hop = done["cost"]["children"][0]
        assert (hop["agent"], hop["skill"]) == ("office", "office.action_items")
    finally:
        await home.daemon.stop()
        await office.daemon.stop()
    script = ROOT / "examples" / "butler-print"
    assert os.access(script, os.X_OK)
    assert "/usr/local/bin/butler-print" in (ROOT / "examples" / "office.yaml").read_text()
