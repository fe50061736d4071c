"""Behaviour the docs describe, pinned where they once disagreed (issue 23, item 9)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.delegation_support import Mesh, skill
from tests.support import Swarm, new_pair, post_task, run_cli


async def test_audit_commands_need_no_token_variable(
    swarm: Swarm, monkeypatch: pytest.MonkeyPatch
) -> None:
    # lan.md runs `butler audit tail|verify -c home.yaml` without the peers' tokens.
    monkeypatch.setenv("BUTLER_TEST_OFFICE_TOKEN", "x" * 64)
    home = await swarm.start("home", peers=[{
        "name": "office", "url": "http://127.0.0.1:9", "token_env": "BUTLER_TEST_OFFICE_TOKEN",
        "capabilities": ["x.work"]}])
    status, _ = await post_task(home, {"task": "t", "skill": "echo"})
    assert status == 200
    config, data_dir = str(home.config_path), home.daemon.config.data_dir
    await swarm.stop(home)
    monkeypatch.delenv("BUTLER_TEST_OFFICE_TOKEN")

    code, out, err = await run_cli("audit", "tail", "-c", config)
    assert code == 0, err
    assert "task_finished" in out
    code, out, err = await run_cli("audit", "verify", "-c", config)
    assert (code, out.splitlines()[0]) == (0, "audit trail intact: 2 record(s) verified"), err
    # The daemon itself still needs it: serving without a peer's token is a config error.
    code, _, err = await run_cli("check-config", config)
    assert code == 2 and "BUTLER_TEST_OFFICE_TOKEN is not set" in err

    db = sqlite3.connect(Path(data_dir) / "audit.db")
    db.execute("DELETE FROM audit WHERE seq=2")
    db.commit()
    db.close()
    code, out, _ = await run_cli("audit", "verify", "-c", config)
    # The text docs/audit.md shows.
    assert code == 1
    first = out.splitlines()[0]
    assert first.startswith("audit trail TAMPERED at record ")
    assert first.endswith("record(s) before it intact)")


async def test_a_task_sent_back_along_its_chain_says_it_would_loop(mesh: Mesh) -> None:
    # lan.md: with the names right, office never sends home's task back to home; the
    # answer used to say that no known peer provides the capability.
    mesh.agent("home", skills=[skill("notes.search")])
    mesh.agent("office", skills=[])
    mesh.link("office", "home", ["notes.search"])
    mesh.link("home", "office", ["memory.search"])
    agents = await mesh.start()
    office = agents["office"]
    status, task = await post_task(office, {"task": "t", "capabilities_needed": ["notes.search"],
                                            "caller_chain": ["home"]}, who="home")
    assert status == 200, task
    assert task["error"]["code"] == "no_capable_skill"
    assert "already in the caller chain" in task["error"]["message"]
    status, task = await post_task(office, {"task": "t", "capabilities_needed": ["nowhere"],
                                            "caller_chain": ["home"]}, who="home")
    assert "neither this agent nor any known peer provides nowhere" in task["error"]["message"]


async def test_the_public_routes_are_the_ones_quickstart_names(swarm: Swarm) -> None:
    # quickstart.md once said every route but /healthz needs a token (issue 39).
    from butler.dashboard import DAEMON_PAGE
    from butler.http_app import PUBLIC_PATHS
    from tests.support import REPO

    named = ("/healthz", "/.well-known/agent-card.json", "/.well-known/ai-catalog.json",
             "/v2/openapi.json", "/dashboard", "/v2/log/head")
    assert set(PUBLIC_PATHS) == {*named, *DAEMON_PAGE.paths, "/v2/log/consistency"}
    assert "`/v2/log/consistency`" in (REPO / "docs" / "quickstart.md").read_text()
    text = (REPO / "docs" / "quickstart.md").read_text()
    home = await swarm.start("home")
    for path in named:
        assert f"`{path}`" in text, path
        async with home.session.get(home.url + path) as resp:
            assert resp.status == 200, path
    async with home.session.get(home.url + "/v2/card") as resp:
        assert resp.status == 401


async def test_a_peer_that_never_accepts_is_a_connect_timeout(swarm: Swarm) -> None:
    # lan.md: an office off the network was reported as "did not answer within 60s"
    # after the 3 s connect timeout (issue 39).
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    waiting = []  # fill the accept queue: the kernel then drops new connections' SYNs
    for _ in range(4):
        client = socket.socket()
        client.setblocking(False)
        client.connect_ex(listener.getsockname())
        waiting.append(client)
    token_file = swarm.tmp / "office.token"
    token_file.write_text(new_pair()[0])
    try:
        home = await swarm.start("home", skills=[], peers=[{
            "name": "office", "url": f"http://127.0.0.1:{listener.getsockname()[1]}",
            "token_file": str(token_file), "capabilities": ["x.work"],
            "connect_timeout_seconds": 0.3, "timeout_seconds": 60}])
        _, task = await post_task(home, {"task": "t", "capabilities_needed": ["x.work"]})
    finally:
        for sock in (*waiting, listener):
            sock.close()
    assert task["error"]["code"] == "peer_timeout", task
    assert "did not accept a connection" in task["error"]["message"]
    assert "60s" not in task["error"]["message"]
