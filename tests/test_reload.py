"""A config reload in a running daemon (butler/reload.py; SIGHUP in tests/test_deploy.py):
new caller limits hold at the next admission (a first cap opens spend.db), new peers are
delegated to, and a config whose plugin does not import is refused whole, the running one
kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from butler.cli.serve import servable_config
from tests.support import Instance, Swarm, plugin_skill, post_task, wait_task, write_config


async def _reload(home: Instance, cfg: dict[str, Any]) -> bool:
    path = write_config(Path(home.config_path).parent, "home", cfg)
    return await home.daemon.reload(lambda: servable_config(str(path)))


def _home_config(home: Instance) -> dict[str, Any]:
    import yaml

    cfg: dict[str, Any] = yaml.safe_load(Path(home.config_path).read_text())
    return cfg


async def test_limits_and_peers_change_in_place(swarm: Swarm, tmp_path: Path) -> None:
    office = await swarm.start("office", callers={"home": {}}, skills=[
        {"id": "office.echo", "builtin": "echo", "capabilities": ["office.echo"],
         "expose": True}])
    home = await swarm.start("home")
    cfg = _home_config(home)
    for _ in range(2):
        status, task = await post_task(home, {"task": "x", "skill": "echo"})
        assert status == 200 and task["state"] == "completed"
    _, no_peer = await post_task(home, {"task": "x", "capabilities_needed": ["office.echo"]})
    assert no_peer["error"]["code"] == "no_capable_skill"

    token_file = tmp_path / "office.token"
    token_file.write_text(office.tokens["home"])
    operator, = cfg["configurations"]["a2a"]["token_hashes"]
    digest = operator if isinstance(operator, str) else operator["sha256"]
    cfg["configurations"]["a2a"]["token_hashes"] = [
        {"sha256": digest, "name": "operator", "limits": {"max_tasks_per_hour": 2}}]
    cfg["peers"] = [{"name": "office", "url": office.url, "token_file": str(token_file),
                     "capabilities": ["office.echo"]}]
    assert await _reload(home, cfg)

    _, sent = await post_task(home, {"task": "x", "capabilities_needed": ["office.echo"]})
    sent = await wait_task(home, sent["id"])
    assert sent["state"] == "completed", sent
    assert sent["cost"]["children"][0]["agent"] == "office"
    status, _ = await post_task(home, {"task": "x", "skill": "echo"})
    assert status == 200  # counted from the reload on: the delegation, then this one
    status, refused = await post_task(home, {"task": "x", "skill": "echo"})
    assert status == 402 and refused["error"]["code"] == "spend_limit_reached"


async def test_a_config_that_does_not_load_is_refused_whole(
    swarm: Swarm, caplog: pytest.LogCaptureFixture
) -> None:
    home = await swarm.start("home")
    cfg = _home_config(home)
    before = home.daemon.config
    broken = {**cfg, "skills": [*cfg["skills"],
                                plugin_skill("broken", "tests.plugins.nowhere:fn")]}
    locked = {**cfg, "configurations": {**cfg["configurations"], "a2a": {
        **cfg["configurations"]["a2a"], "token_hashes": []}}}
    for bad, why in ((broken, "tests.plugins.nowhere"), (locked, "token_hashes")):
        caplog.clear()
        assert not await _reload(home, bad)
        assert home.daemon.config is before
        assert "config reload refused, the running config is kept" in caplog.text
        assert why in caplog.text
    status, task = await post_task(home, {"task": "x", "skill": "echo"})
    assert status == 200 and task["state"] == "completed"
