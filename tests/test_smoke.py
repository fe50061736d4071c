from __future__ import annotations

import aiohttp

from tests.support import Swarm


async def test_echo_task_round_trip(swarm: Swarm, http: aiohttp.ClientSession) -> None:
    home = await swarm.start("home")
    async with http.post(f"{home.url}/v2/tasks", json={"task": "hi", "skill": "echo"},
                         headers=home.headers()) as resp:
        assert resp.status == 200
        body = await resp.json()
    assert body["state"] == "completed"
    assert body["output"] == "hi"
