"""Which webhook addresses push notifications may reach (the SSRF guard).

Refused always: loopback, link-local, cloud-metadata, multicast, unspecified, reserved
and other non-global special addresses (100.64.0.0/10, ...). Refused unless
``allow_private_networks``: private networks (10/8, 172.16/12, 192.168/16, fc00::/7...).
An IPv4-mapped IPv6 address is judged as the IPv4 address inside it.

A URL is checked when a config is created and again at every delivery, after DNS
resolution: the delivery connects only to the addresses that passed (``resolver``), so
a name that resolves differently later (DNS rebinding) cannot slip through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

_METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254"),
             ipaddress.ip_address("100.100.100.200")}


class WebhookRefused(ValueError):
    pass


@dataclass(frozen=True)
class PushGuard:
    allow_private: bool = False
    allow_loopback: bool = False  # tests only: never set from the config

    def refusal(self, address: str) -> str | None:
        """Why ``address`` may not be called, or None when it may."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return f"{address!r} is not an IP address"
        mapped = getattr(ip, "ipv4_mapped", None)
        if mapped is not None:
            ip = mapped
        if ip in _METADATA:
            return f"{ip} is a cloud-metadata address"
        if ip.is_loopback:
            return None if self.allow_loopback else f"{ip} is a loopback address"
        if ip.is_link_local or ip.is_multicast or ip.is_unspecified or ip.is_reserved:
            return f"{ip} is a link-local, multicast or reserved address"
        if ip.is_private:
            return None if self.allow_private else (
                f"{ip} is a private-network address (allow it with "
                "configurations.a2a.push_notifications.allow_private_networks)")
        if not ip.is_global:
            return f"{ip} is not a public address"
        return None

    async def check_url(self, url: str) -> None:
        """Raise ``WebhookRefused`` unless every address of the URL's host may be called."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise WebhookRefused("the webhook URL must be http or https")
        if parts.username is not None or parts.password is not None:
            raise WebhookRefused("the webhook URL must not carry credentials")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise WebhookRefused("the webhook URL has an invalid port") from None
        if not parts.hostname:
            raise WebhookRefused("the webhook URL has no host")
        for address in await _resolve(parts.hostname, port):
            if (why := self.refusal(address)) is not None:
                raise WebhookRefused(f"webhook host {parts.hostname} refused: {why}")

    def resolver(self) -> AbstractResolver:
        return _GuardedResolver(self)


async def _resolve(host: str, port: int) -> list[str]:
    try:
        ipaddress.ip_address(host)
        return [host]
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port,
                                                             type=socket.SOCK_STREAM)
    except OSError as exc:
        raise WebhookRefused(f"cannot resolve {host}: {exc.strerror or exc}") from None
    return [str(info[4][0]) for info in infos]


class _GuardedResolver(AbstractResolver):
    """Resolves like aiohttp does, then refuses the connection if any address fails."""

    def __init__(self, guard: PushGuard) -> None:
        self._guard = guard
        self._inner = DefaultResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            if (why := self._guard.refusal(result["host"])) is not None:
                raise OSError(f"webhook host {host} refused: {why}")
        return results

    async def close(self) -> None:
        await self._inner.close()

    def __repr__(self) -> str:
        return f"_GuardedResolver({self._guard!r})"
