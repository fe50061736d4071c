"""CPU and wall time of one Butler-to-Butler delegation: home delegates to office (echo),
both daemons and the client in this process, N sequential blocking /v2 tasks after 20 to
warm up.

    PYTHONPATH=. .venv/bin/python bench/delegation_cpu.py 400

Prints the process's CPU per task (``time.process_time``, the daemons' writer threads
included: it moves less than wall time on a shared host) and the median and p90 wall
time. Run it on two builds, alternately, a few times each."""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.delegation_support import Mesh, skill

WARM_UP = 20


async def main(n: int) -> None:
    async with aiohttp.ClientSession() as http:
        mesh = Mesh(Path(tempfile.mkdtemp()), http)
        mesh.agent("home", skills=[])
        mesh.agent("office", skills=[skill("x.work")])
        mesh.link("home", "office", ["x.work"])
        home = (await mesh.start())["home"]
        times: list[float] = []
        cpu = 0.0
        try:
            for i in range(n + WARM_UP):
                if i == WARM_UP:
                    cpu = time.process_time()
                started = time.perf_counter()
                async with http.post(home.url + "/v2/tasks", headers=home.headers(), json={
                        "task": f"t{i}", "capabilities_needed": ["x.work"]}) as resp:
                    body = await resp.json()
                assert body["state"] == "completed", body
                if i >= WARM_UP:
                    times.append(time.perf_counter() - started)
            cpu = time.process_time() - cpu
        finally:
            await mesh.close()
    times.sort()
    print(f"cpu {cpu / n * 1000:.2f} ms/task  median {statistics.median(times) * 1000:.2f} ms"
          f"  p90 {times[int(len(times) * 0.9)] * 1000:.2f} ms")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 400))
