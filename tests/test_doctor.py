"""``butler doctor`` against real daemons: a healthy pair passes; a peer whose pinned key
no longer signs its card, a token the peer refuses and a port held by another program are
each a problem with the fix named, and the exit code says so."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from butler.delegation.peer_identity import PINS_FILE
from internal.signing import IdentityKey
from tests.support import Instance, Swarm, run_cli, write_config


async def _home(swarm: Swarm, tmp_path: Path, token: str) -> Instance:
    office = swarm.instances[0]
    token_file = tmp_path / "office.token"
    token_file.write_text(token)
    return await swarm.start("home", peers=[{
        "name": "office", "url": office.url, "token_file": str(token_file),
        "capabilities": ["echo"]}])


async def _doctor(inst: Instance) -> tuple[int, dict[str, Any]]:
    code, out, err = await run_cli("doctor", "-c", str(inst.config_path), "--json")
    assert out, err
    return code, json.loads(out)


def _about(report: dict[str, Any], check: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["check"] == check]


async def test_a_healthy_pair_passes_and_a_changed_key_is_named(swarm: Swarm,
                                                                tmp_path: Path) -> None:
    office = await swarm.start("office", callers={"home": {}})
    home = await _home(swarm, tmp_path, office.tokens["home"])
    code, report = await _doctor(home)
    assert code == 0, report
    assert report["ok"] is True
    peer = _about(report, "peer office")
    assert [f["status"] for f in peer] == ["ok", "ok", "ok"]
    assert "accepts the token" in peer[-1]["detail"]
    assert _about(report, "clock")[0]["status"] == "ok"
    # key show --json: the JWK as JSON, the kid the peers pin.
    code, out, _ = await run_cli("key", "show", "-c", str(home.config_path), "--json")
    shown = json.loads(out)
    assert code == 0 and shown["kid"] == home.daemon.identity.kid
    assert shown["public_key"]["kty"] == "OKP" and shown["public_key"]["crv"] == "Ed25519"

    # office reinstalled: home still pins its old key.
    other = IdentityKey.generate()
    (home.daemon.config.data_dir / PINS_FILE).write_text(json.dumps(
        {"office": {"jwk": other.public.jwk, "kid": other.public.kid}}))
    code, report = await _doctor(home)
    assert code == 1
    changed = [f for f in _about(report, "peer office") if f["status"] == "problem"]
    assert len(changed) == 1 and "peer_identity_changed" in changed[0]["detail"]
    assert PINS_FILE in changed[0]["fix"]
    # The token is not sent to a peer whose key does not check.
    assert not any("token" in f["detail"] for f in _about(report, "peer office"))


async def test_a_refused_token_and_a_taken_port_are_problems(swarm: Swarm,
                                                              tmp_path: Path) -> None:
    await swarm.start("office", callers={"home": {}})
    home = await _home(swarm, tmp_path, "not-the-token-office-knows-0123456789")
    code, report = await _doctor(home)
    assert code == 1
    refused = _about(report, "peer office")[-1]
    assert refused["status"] == "problem" and "refuses" in refused["detail"]
    assert "token_hashes" in refused["fix"]

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        cfg = {"agent": {"id": "third"}, "data_dir": str(tmp_path / "third"),
               "configurations": {"a2a": {
                   "enabled": True, "port": holder.getsockname()[1],
                   "token_hashes": ["a" * 64]}}}
        path = write_config(tmp_path, "third", cfg)
        code, out, _ = await run_cli("doctor", "-c", str(path), "--json")
    report = json.loads(out)
    assert code == 1
    port = _about(report, "A2A port")[0]
    assert port["status"] == "problem" and "is taken" in port["detail"] and port["fix"]
    assert _about(report, "data folder")[0]["detail"].endswith("is made on the first start")


async def test_the_registry_and_its_token(tmp_path: Path) -> None:
    from tests.registry.registry_support import TOKENS, sqlite_registry

    async with sqlite_registry(tmp_path) as registry:
        for token, status in ((TOKENS["alice"], "ok"), ("not-a-registry-token-000", "problem")):
            (tmp_path / "registry.token").write_text(token)
            cfg = {"agent": {"id": "home"}, "data_dir": str(tmp_path / "home"),
                   "configurations": {
                       "a2a": {"enabled": True, "port": 0, "token_hashes": ["a" * 64]},
                       "registry": {"url": registry.url, "self_register": False,
                                    "token_file": str(tmp_path / "registry.token")}}}
            path = write_config(tmp_path, "home", cfg)
            code, out, _ = await run_cli("doctor", "-c", str(path), "--json")
            found, = _about(json.loads(out), "registry")
            assert found["status"] == status, found
            assert code == (0 if status == "ok" else 1)
    assert "refuses this config's token" in found["detail"]
