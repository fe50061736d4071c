"""URLs no outbound path may call, whatever its rules: one corpus for every suite.

Each is refused even under the most lenient rules (a peer the operator configured:
loopback and private networks allowed). ``{port}`` stands for a recording listener on
127.0.0.1: where a URL would reach this host if the guard let it through, it reaches the
listener, and the listener proves nothing did. Names ending in ``.hostile.test`` exist
only in ``HostileNames``, the resolver tests hand to the guard.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

from aiohttp.abc import AbstractResolver, ResolveResult

# url -> what it tries
HOSTILE: dict[str, str] = {
    "http://169.254.169.254/latest/meta-data/": "AWS/GCP/Azure metadata",
    "https://169.254.169.254/": "metadata over https",
    "http://169.254.170.2/v2/credentials": "AWS ECS credentials",
    "http://100.100.100.200/latest/meta-data/": "Alibaba metadata (inside 100.64/10)",
    "http://192.0.0.192/opc/v2/instance/": "Oracle metadata",
    "http://[fd00:ec2::254]/latest/meta-data/": "AWS IMDS over IPv6 (inside fc00::/7)",
    "http://169.254.0.1:{port}/": "IPv4 link-local",
    "http://[fe80::1]:{port}/": "IPv6 link-local",
    "http://[fe80::1%25lo]:{port}/": "IPv6 link-local with a zone",
    "http://[::ffff:169.254.169.254]/": "IPv4-mapped metadata",
    "http://[::ffff:a9fe:a9fe]/": "IPv4-mapped metadata, in hex",
    "http://[::169.254.169.254]/": "IPv4-compatible metadata",
    "http://[2002:a9fe:a9fe::1]/": "6to4 metadata",
    "http://[64:ff9b::a9fe:a9fe]/": "NAT64 metadata",
    "http://[::ffff:100.100.100.200]/": "IPv4-mapped Alibaba metadata",
    "http://[::ffff:0.0.0.0]:{port}/": "IPv4-mapped unspecified",
    "http://[::ffff:224.0.0.1]/": "IPv4-mapped multicast",
    "http://0.0.0.0:{port}/": "unspecified (Linux connects it to this host)",
    "http://[::]:{port}/": "IPv6 unspecified",
    "http://0.1.2.3:{port}/": "this network (0.0.0.0/8)",
    "http://255.255.255.255/": "broadcast",
    "http://240.0.0.1/": "reserved",
    "http://224.0.0.1/": "multicast",
    "http://[ff02::1]/": "IPv6 multicast",
    "http://192.0.2.1/": "documentation (TEST-NET-1)",
    "http://198.18.0.1/": "benchmarking",
    "http://[2001:db8::1]/": "IPv6 documentation",
    "http://2852039166/": "metadata as one decimal number",
    "http://0xa9fea9fe/": "metadata in hex",
    "http://0251.0376.0251.0376/": "metadata in octal",
    "http://0xa9.0xfe.0xa9.0xfe/": "metadata, each part in hex",
    "http://169.254.43518/": "metadata, last two parts as one number",
    "http://127.1:{port}/": "loopback, shortened (inet_aton reads it)",
    "http://0:{port}/": "zero as a host",
    "http://169.254.169.254./": "metadata with a trailing dot",
    "http://good@169.254.169.254/": "userinfo before a metadata host",
    "http://user:pass@127.0.0.1:{port}/": "credentials in the URL",
    "http://169.254.169.254@127.0.0.1:{port}/": "a metadata address as userinfo",
    "file:///etc/passwd": "file scheme",
    "gopher://127.0.0.1:{port}/_GET%20/": "gopher scheme",
    "ftp://127.0.0.1:{port}/": "ftp scheme",
    "dict://127.0.0.1:{port}/": "dict scheme",
    "http:///no-host": "no host",
    "http://[1:2]:{port}/": "malformed IPv6 literal",
    "http://exa%20mple.test:{port}/": "percent-encoded host",
    "http://%31%36%39.254.169.254/": "percent-encoded metadata address",
    "http://metadata.hostile.test:{port}/": "a name that resolves to metadata",
    "http://mapped.hostile.test:{port}/": "a name that resolves to IPv4-mapped metadata",
    "http://rebind.hostile.test:{port}/": "a name with one good and one metadata address",
    "http://zero.hostile.test:{port}/": "a name that resolves to 0.0.0.0",
    "http://linklocal6.hostile.test:{port}/": "a name that resolves to IPv6 link-local",
}

# Names a test resolver answers: each resolves to addresses the guard refuses.
HOSTILE_NAMES: dict[str, tuple[str, ...]] = {
    "metadata.hostile.test": ("169.254.169.254",),
    "mapped.hostile.test": ("::ffff:169.254.169.254",),
    "rebind.hostile.test": ("127.0.0.1", "169.254.169.254"),
    "zero.hostile.test": ("0.0.0.0",),
    "linklocal6.hostile.test": ("fe80::1",),
}


def hostile_urls(port: int) -> list[str]:
    return [url.replace("{port}", str(port)) for url in HOSTILE]


class HostileNames(AbstractResolver):
    """A hosts file for tests: ``names`` maps a host name to its addresses (changeable
    between calls, for rebinding); every other name does not resolve. Records each
    name asked, so a test can tell the guard resolved through it."""

    def __init__(self, names: Mapping[str, Sequence[str]] | None = None) -> None:
        self.names: dict[str, tuple[str, ...]] = dict(HOSTILE_NAMES)
        self.names.update({k: tuple(v) for k, v in (names or {}).items()})
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in self.names:
            raise OSError(socket.EAI_NONAME, "Name or service not known")
        return [ResolveResult(
            hostname=host, host=address, port=port,
            family=socket.AF_INET6 if ":" in address else socket.AF_INET,
            proto=0, flags=socket.AI_NUMERICHOST) for address in self.names[host]]

    async def close(self) -> None:
        return None


class Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts (and answers
    each with a bare 200, so a call that got through would look like a success)."""

    def __init__(self) -> None:
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        await writer.drain()
        writer.close()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Listener]:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            self._server.close()
            await self._server.wait_closed()
