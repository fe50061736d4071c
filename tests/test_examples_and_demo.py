"""The README's main job and the shipped example configs keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from butler.config import load_config

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
