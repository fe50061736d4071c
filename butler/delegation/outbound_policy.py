"""Which URLs this daemon may call when an address comes from someone else (a registry).

http/https only, no credentials in the URL; link-local and cloud-metadata addresses are
always refused; loopback and private networks only when the config allows them.
Host names are resolved and every address must pass.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

_METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}


class PolicyViolation(ValueError):
    pass


@dataclass(frozen=True)
class OutboundPolicy:
    allow_loopback: bool = True
    allow_private: bool = True

    def check_address(self, address: str) -> None:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if ip in _METADATA or ip.is_link_local or ip.is_multicast or ip.is_unspecified:
            raise PolicyViolation(f"{ip} is a link-local, metadata or reserved address")
        if ip.is_loopback:
            if not self.allow_loopback:
                raise PolicyViolation(f"{ip} is a loopback address")
        elif ip.is_private and not self.allow_private:
            raise PolicyViolation(f"{ip} is a private-network address")

    async def check_url(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise PolicyViolation(f"scheme {parts.scheme!r} is not http or https")
        if parts.username is not None or parts.password is not None:
            raise PolicyViolation("credentials in the URL")
        host = parts.hostname
        if not host:
            raise PolicyViolation("no host")
        try:
            self.check_address(host)
            return
        except ValueError as exc:
            if isinstance(exc, PolicyViolation):
                raise
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, parts.port or 80, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise PolicyViolation(f"cannot resolve {host}: {exc.strerror}") from None
        for info in infos:
            self.check_address(str(info[4][0]))
