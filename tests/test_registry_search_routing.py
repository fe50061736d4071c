"""A task in plain words reaches an agent the registry knows only from a crawled
catalog (its ARD index, not /v1), through the registry's ``POST /search``; with the
registry down the task is still routed among what this instance knows."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import aiohttp

from butler.audit import AuditLog
from butler.cli.route_cmd import rank
from butler.cli.serve import load_or_exit
from butler.registry.ard_api import ARD
from butler.registry.clock import SystemClock
from butler.registry.federation_config import FederationConfig
from butler.registry.service import start_registry
from butler.registry.store_url import open_store
from butler.routing import explain
from internal.http import hash_token
from internal.protocol.a2a.model import TaskRequest, TaskState
from tests.delegation_support import Mesh, free_port, skill
from tests.registry.registry_support import TOKENS, config
from tests.support import Instance

SWARM_TOKEN = "swarm-shared-token-0123456789abcdef"


def registry_section(tmp_path: Path, url: str, **more: Any) -> dict[str, dict[str, Any]]:
    (tmp_path / "swarm.token").write_text(SWARM_TOKEN)
    (tmp_path / "root.token").write_text(TOKENS["root"])
    return {"registry": {"url": url, "token_file": str(tmp_path / "root.token"),
                         "peer_token_file": str(tmp_path / "swarm.token"),
                         "cache_seconds": 0, **more}}


async def test_plain_words_reach_an_agent_known_only_from_the_ard_index(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    mesh = Mesh(tmp_path, http)
    poems = skill("office.poems", "0.02", name="Poem translation",
                  description="Translates poems between languages, keeping the metre",
                  tags=["poetry", "translation"], examples=["translate this sonnet"])
    # office is in no config and never registers: the registry crawls its catalog.
    mesh.agent("office", skills=[poems], accept=[hash_token(SWARM_TOKEN)])
    catalog = mesh.url("office") + "/.well-known/ai-catalog.json"
    store = await open_store(f"sqlite:{tmp_path / 'registry.db'}")
    reg = await start_registry(dataclasses.replace(config(federation=FederationConfig(
        catalogs=(catalog,), crawl_loopback=True, crawl_registered=False)),
        bind_address="127.0.0.1", port=0), store, SystemClock())
    url = f"http://127.0.0.1:{reg.address[1]}"
    section = registry_section(tmp_path, url)
    mesh.agent("home", skills=[skill("home.lights", name="Lights",
                                     description="Turns the lights on and off")],
               configurations=section)
    # lab trusts no publisher: the same search finds office, and it is not called.
    mesh.agent("lab", skills=[skill("lab.lights", name="Lights")],
               configurations=registry_section(tmp_path, url))
    section["registry"]["trusted_publishers"] = ["127.0.0.1"]
    try:
        agents = await mesh.start()
        home = agents["home"]
        # The crawl at the registry's start found office not yet up: crawled again now.
        now = time.time()
        report = await reg.runner.app[ARD].crawler.crawl(
            catalog, origin=f"catalog:{catalog}", expires_at=now + 600, now=now)
        assert "urn:air:127.0.0.1:agent:office" in report.admitted, report.refused
        async with http.get(f"{url}/v1/agents", headers={
                "Authorization": f"Bearer {TOKENS['root']}"}) as resp:
            assert (await resp.json())["agents"] == []  # known to ARD only

        task = await agents["home"].client().submit(
            TaskRequest(text="please translate a sonnet into French poetry"))
        assert task.state is TaskState.COMPLETED, task.error
        assert task.cost is not None
        [hop] = task.cost.children
        assert hop.agent == "office"
        # butler route --cards --explain: where each candidate came from.
        loaded = load_or_exit(str(home.config_path))
        assert loaded is not None
        ranking = await rank(loaded, "translate a sonnet into French poetry", cards=True)
        assert ranking.best is not None and ranking.best.candidate.peer == "office"
        assert f"[registry:{url}]" in explain(ranking)

        untrusted = await agents["lab"].client().submit(
            TaskRequest(text="please translate a sonnet into French poetry"))
        assert untrusted.cost is None or not untrusted.cost.children
    finally:
        await mesh.close()
        await reg.close()
        await store.close()
    [sent] = [r for r in await _audit(home) if r["kind"] == "delegation_sent"]
    assert sent["detail"]["source"] == f"registry:{url}"


async def test_with_the_registry_down_plain_words_are_routed_locally(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    mesh = Mesh(tmp_path, http)
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    mesh.agent("home", skills=[
        skill("home.lights", name="Lights", description="Turns the lights on and off",
              tags=["lights", "lamp"]),
        skill("home.heating", name="Heating", description="Sets the thermostat")],
        configurations=registry_section(tmp_path, down, trusted_publishers=["127.0.0.1"]))
    try:
        agents = await mesh.start()
        task = await agents["home"].client().submit(TaskRequest(text="turn the lights on"))
        assert task.state is TaskState.COMPLETED, task.error
        assert task.skill == "home.lights"
    finally:
        await mesh.close()


async def _audit(inst: Instance) -> list[dict[str, Any]]:
    """The records of a stopped instance (a blocking read, so on a thread)."""
    def read() -> list[dict[str, Any]]:
        with AuditLog(inst.daemon.config.data_dir / "audit.db") as log:
            return [r.to_json() for r in log.iter_all()]
    return await asyncio.to_thread(read)
