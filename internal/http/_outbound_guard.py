"""The one guard for every URL Butler calls: peers from the config or a registry, agent
cards, push webhooks, the registry itself.

A call passes in two steps, both on the session ``outbound_session`` builds:

1. the URL, before any connection (a client middleware, so every request is judged,
   whichever code sent it): http or https, no credentials, a well-formed host; an IP
   literal is judged here, since aiohttp never resolves one;
2. the name, at connection time (the connector's resolver): resolved once, every address
   judged, and only judged addresses handed to the connector, so the connection goes to
   an address that passed and a name that resolves differently later (DNS rebinding)
   cannot slip through.

An address is judged as the IPv4 address inside it when it is IPv4-mapped, IPv4-compatible,
6to4, NAT64 (64:ff9b::/96) or Teredo. Always refused: cloud metadata, link-local,
multicast, unspecified (0.0.0.0/8, ::), and every other special-purpose address that is not
global (broadcast, reserved, documentation, benchmarking...). Loopback and private networks
(10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) depend on the use (``OutboundRules``).
A host written as a number in another form than a dotted quad (``2852039166``,
``0xa9fea9fe``, ``0251.0376.0251.0376``, ``127.1``) is refused: resolvers read such
spellings differently, so no rule could be sure which address it names.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from yarl import URL

from internal.protocol.a2a.model import OutboundRefused

if TYPE_CHECKING:  # aiohttp only where a session uses the guard (a blocking client does not)
    from aiohttp import ClientHandlerType, ClientRequest, ClientResponse
    from aiohttp.abc import AbstractResolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_METADATA = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean...
    "169.254.170.2",  # AWS ECS task credentials
    "100.100.100.200",  # Alibaba Cloud
    "192.0.0.192",  # Oracle Cloud
    "fd00:ec2::254",  # AWS IMDS over IPv6
))
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # Linux connects 0.x.x.x to this host
_PRIVATE = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")
_NUMBER = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")


JUDGED_LIMIT = 4096  # addresses whose judgement a guard remembers

@dataclass(frozen=True)
class OutboundRules:
    """What one use of outbound calls may reach besides public addresses.

    ``loopback_key`` / ``private_key``: the config key that opens the class, named in a
    refusal so the operator knows where the rule comes from.
    """

    allow_loopback: bool = False
    allow_private: bool = False
    loopback_key: str = ""
    private_key: str = ""


# Peers the operator wrote into the config by URL (and the registry it points at):
# LAN and same-host use is the point; metadata and link-local stay refused.
CONFIGURED = OutboundRules(allow_loopback=True, allow_private=True)

ResolverFactory = Callable[[], "AbstractResolver"]


class OutboundGuard:
    """Judges URLs and addresses under ``rules``; ``names`` builds the resolver that host
    names go through in an aiohttp session (the system's by default; tests map names to
    addresses with it). The blocking transport resolves with the system's resolver and
    hands what it got to ``check_addresses``, the same step 2."""

    def __init__(self, rules: OutboundRules = OutboundRules(), *,
                 names: ResolverFactory | None = None) -> None:
        self.rules = rules
        self._names = names
        # Judgements by address: the rules never change, and judging parses and tests
        # the address with the ipaddress module, twice per call, on every hop.
        self._judged: dict[str, str | None] = {}

    def __repr__(self) -> str:
        return f"OutboundGuard({self.rules!r})"

    def refusal(self, address: IPAddress) -> str | None:
        """Why ``address`` may not be called, or None when it may."""
        inner = embedded_ipv4(address) if address.version == 6 else None
        if inner is not None:
            why = self.refusal(inner)
            return None if why is None else f"{address} carries {inner}: {why}"
        if address in _METADATA:
            return f"{address} is a cloud metadata address"
        if address.is_unspecified or address in _THIS_NETWORK:
            return f"{address} is an unspecified address"
        if address.is_link_local:
            return f"{address} is a link-local address"
        if address.is_multicast:
            return f"{address} is a multicast address"
        rules = self.rules
        if address.is_loopback:
            return None if rules.allow_loopback else _closed(
                f"{address} is a loopback address", rules.loopback_key)
        if any(address in net for net in _PRIVATE):
            return None if rules.allow_private else _closed(
                f"{address} is a private-network address", rules.private_key)
        if not address.is_global:
            return f"{address} is a reserved or special-purpose address"
        return None

    def check_address(self, host: str, address: str) -> None:
        """Raise ``OutboundRefused`` unless ``address`` (one answer for ``host``) passes."""
        try:
            why = self._judged[address]
        except KeyError:
            try:
                ip = ipaddress.ip_address(address.split("%", 1)[0])
            except ValueError:
                raise OutboundRefused(host, f"{address!r} is not an IP address") from None
            why = self.refusal(ip)
            if len(self._judged) >= JUDGED_LIMIT:
                self._judged.clear()
            self._judged[address] = why
        if why is not None:
            raise OutboundRefused(host, why)

    def check_addresses(self, host: str, addresses: Sequence[str]) -> None:
        """Step 2, whichever transport resolved ``host``: it must have an address, and
        every address it has must pass (one bad answer refuses the name: DNS rebinding)."""
        if not addresses:
            raise OutboundRefused(host, "the name has no address")
        for address in addresses:
            self.check_address(host, address)

    def check_target(self, url: str | URL) -> URL:
        """Step 1: the URL itself, without resolving anything. Returns it parsed."""
        try:
            parsed = url if isinstance(url, URL) else URL(url)
            port = parsed.port
        except (ValueError, TypeError):
            raise OutboundRefused("", "not a valid URL") from None
        host = parsed.raw_host or ""
        if parsed.scheme not in ("http", "https"):
            raise OutboundRefused(host, f"scheme {parsed.scheme!r} is not http or https")
        if parsed.raw_user is not None or parsed.raw_password is not None:
            raise OutboundRefused(host, "credentials in the URL")
        if not host:
            raise OutboundRefused("", "the URL has no host")
        if port is None or not 0 < port < 65536:
            raise OutboundRefused(host, "the URL has no valid port")
        literal = ip_literal(host)
        if literal is not None:
            self.check_address(host, literal)
        return parsed

    async def check_url(self, url: str | URL) -> None:
        """Steps 1 and 2 at once, for a URL that is stored now and called later (a webhook,
        a registry entry): a name must resolve, and every address it has must pass."""
        parsed = self.check_target(url)
        host = parsed.raw_host or ""
        if ip_literal(host) is not None:
            return
        resolver = self.resolver()
        try:
            await resolver.resolve(host, parsed.port or 0, socket.AF_UNSPEC)
        except OSError as exc:
            raise OutboundRefused(host, f"cannot resolve: {exc.strerror or exc}") from None
        finally:
            await resolver.close()

    def resolver(self) -> AbstractResolver:
        """Step 2: the connector's resolver. Each connector owns (and closes) its own."""
        from internal.http._pinned_resolver import PinnedResolver, system_resolver

        inner = self._names() if self._names is not None else system_resolver()
        return PinnedResolver(self.check_addresses, inner, repr(self))

    async def middleware(self, request: ClientRequest,
                         handler: ClientHandlerType) -> ClientResponse:
        """Step 1 for every request of a guarded session, redirects included."""
        self.check_target(request.url)
        return await handler(request)


def _closed(why: str, key: str) -> str:
    return f"{why} (allowed by {key})" if key else why


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (and so reaches), if it carries one."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _IPV4_COMPATIBLE and int(address) > 1:  # :: and ::1 are IPv6's own
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.teredo is not None:
        return address.teredo[1]
    return None


@functools.lru_cache(maxsize=1024)
def ip_literal(host: str) -> str | None:
    """``host`` as an IP address if it is one, None if it is a well-formed name;
    ``OutboundRefused`` if it is neither, or a number spelt in another form than a dotted
    quad (``0x7f000001``, ``2130706433``, ``0177.0.0.1``, ``127.1``)."""
    if ":" in host:  # yarl has taken the brackets off an IPv6 literal
        try:
            ipaddress.IPv6Address(host.replace("%25", "%"))
        except ValueError:
            raise OutboundRefused(host, "malformed IPv6 address") from None
        return host.replace("%25", "%")
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    if _NUMBER.fullmatch(labels[-1]):  # a name never ends in a number (WHATWG URL)
        try:
            return str(ipaddress.IPv4Address(name))
        except ValueError:
            pass
        try:
            denotes = f" ({socket.inet_ntoa(socket.inet_aton(name))} spelt another way)"
        except OSError:
            denotes = ""
        raise OutboundRefused(host, f"not a dotted-quad IPv4 address{denotes}")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise OutboundRefused(host, "malformed host name")
    return None
