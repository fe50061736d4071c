"""HTTPS served directly, and peers verified against a pinned CA."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from internal.protocol.a2a.model import TaskRequest, TaskState
from tests.delegation_support import Mesh, skill
from tests.raw_http import close, get_healthz
from tests.support import Swarm, wait_until

OPENSSL = shutil.which("openssl")


def make_ca_and_cert(tmp: Path, name: str) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it."""
    assert OPENSSL is not None, "openssl is needed (.ci/run installs it)"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run([OPENSSL, *args], check=True, capture_output=True, cwd=tmp, timeout=30)

    run("req", "-x509", *ec, "-keyout", f"{name}-ca.key", "-out", f"{name}-ca.pem",
        "-days", "2", "-subj", f"/CN={name} test CA")
    run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", "/CN=127.0.0.1")
    (tmp / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{name}-ca.pem", "-CAkey",
        f"{name}-ca.key", "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
        "-extfile", f"{name}.ext")
    return tmp / f"{name}-ca.pem", tmp / f"{name}.pem", tmp / f"{name}.key"


async def test_delegation_over_https_with_a_pinned_ca(mesh: Mesh, tmp_path: Path) -> None:
    ca, cert, key = make_ca_and_cert(tmp_path, "office")
    other_ca, _, _ = make_ca_and_cert(tmp_path, "stranger")
    tls = {"a2a": {"tls": {"cert_file": str(cert), "key_file": str(key)}}}
    mesh.agent("home", skills=[])
    mesh.agent("office", skills=[skill("x.work")], configurations=tls)
    https = mesh.url("office").replace("http://", "https://")
    mesh.link("home", "office", ["x.work"], url=https, ca_file=str(ca))
    mesh.link("home", "office", ["y.work"], name="office-wrong-ca", url=https,
              ca_file=str(other_ca))
    mesh.link("home", "office", ["z.work"], name="office-plain", url=mesh.url("office"))
    agents = await mesh.start()
    assert agents["office"].url.startswith("https://")

    ok = await agents["home"].client().submit(
        TaskRequest(text="secure", capabilities_needed=("x.work",)))
    assert ok.state is TaskState.COMPLETED, ok.error
    assert ok.parts[0].text == "secure"

    wrong = await agents["home"].client().submit(
        TaskRequest(text="x", capabilities_needed=("y.work",)))
    assert wrong.error is not None and wrong.error.code == "peer_tls_error"

    plain = await agents["home"].client().submit(
        TaskRequest(text="x", capabilities_needed=("z.work",)))
    assert plain.state is TaskState.FAILED  # plain HTTP to a TLS port goes nowhere


def test_bad_tls_files_stop_the_config(tmp_path: Path) -> None:
    from butler.config import ConfigError, parse_config

    (tmp_path / "junk.pem").write_text("not a certificate")
    text = (f"configurations:\n  a2a:\n    tls: {{cert_file: {tmp_path / 'junk.pem'}, "
            f"key_file: {tmp_path / 'junk.pem'}}}\n")
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert "configurations.a2a.tls" in str(info.value)


async def test_a_connection_past_its_share_is_refused_before_its_tls_handshake(
        swarm: Swarm, tmp_path: Path) -> None:
    """A connection takes its place on the port when it is accepted, not when its TLS
    handshake ends: one address's connections still in their handshake are counted, and
    one past the address's share is closed at once, without a handshake (such connections
    were not counted at all, and each held a descriptor until the header deadline)."""
    ca, cert, key = make_ca_and_cert(tmp_path, "home")
    home = await swarm.start("home", configurations={"a2a": {"tls": {
        "cert_file": str(cert), "key_file": str(key)}}}, extra={"server": {
            "max_connections": 4, "max_connections_per_address": 2}})
    context = ssl.create_default_context(cafile=str(ca))
    incidents = home.daemon.incidents.totals
    # Never a ClientHello from these two: accepted in order, each holds one of the
    # address's two places.
    silent = [await asyncio.open_connection("127.0.0.1", home.daemon.port) for _ in range(2)]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", home.daemon.port)
        async with asyncio.timeout(5):
            assert await reader.read() == b""  # closed, nothing written
        await close(writer)
        assert incidents["connection_cap"] == 1
        # Another address has its own share: served over TLS while the two hold theirs.
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", home.daemon.port, ssl=context, local_addr=("127.0.0.2", 0))
        assert await get_healthz(reader, writer) == 200
        await close(writer)
    finally:
        for _, writer in silent:
            await close(writer)
    # Their places are given back: the address is served again.
    async def served() -> bool:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", home.daemon.port,
                                                           ssl=context)
        except OSError:  # refused still: closed during the handshake
            return False
        try:
            return await get_healthz(reader, writer) == 200
        finally:
            await close(writer)
    await wait_until(served, what="127.0.0.1 served again")
