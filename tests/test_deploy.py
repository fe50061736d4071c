"""The service files start the daemon the way it is documented: config path and secrets
from the environment, no token on any command line."""

from __future__ import annotations

import asyncio
import configparser
import sys
from pathlib import Path

from tests.support import REPO, child_env, config_dict, new_pair, write_config


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
