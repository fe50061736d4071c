"""Which names a listener answers to, and which browser origins may call it.

A web page on another site can make a browser send requests to the daemon (a form post,
``fetch`` in ``no-cors`` mode), and with DNS rebinding a name of the attacker's that now
resolves to 127.0.0.1 can even read the answers. Both carry tell-tale headers: a ``Host``
that is not one of the daemon's names, and an ``Origin`` that is not the daemon's own.

- ``Host`` must be an IP address (rebinding needs a name), one of the names the daemon
  serves (``configurations.a2a.public_hosts``, the host of ``agent.url``) or, on a
  loopback or wildcard bind, ``localhost``; else ``421 misdirected_request``.
- ``Origin``, when sent, must be the daemon's own (the same authority as ``Host``) or one
  of ``configurations.a2a.allowed_origins``; else ``403 origin_refused``. Clients that are
  not browsers send no ``Origin``. ``/mcp`` is checked the same way, as the MCP streamable
  HTTP transport requires of servers.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping

from internal.protocol.a2a.model import AuthError, RequestError

_DEFAULT_PORTS = {"http": "80", "https": "443"}


class OriginPolicy:
    def __init__(self, names: Iterable[str], allowed_origins: Iterable[str] = ()) -> None:
        """``names``: the host names served (any case, without port); IP addresses are
        always served. ``allowed_origins``: ``scheme://host[:port]`` of other sites whose
        pages may call."""
        self.names = frozenset(n.lower().rstrip(".") for n in names)
        self.allowed_origins = frozenset(o.lower().rstrip("/") for o in allowed_origins)

    def check(self, headers: Mapping[str, str]) -> None:
        host = headers.get("Host")
        if host is not None and not self._serves(host):
            raise RequestError("misdirected_request",
                               "this server does not answer to that Host name (list it in "
                               "configurations.a2a.public_hosts)")
        origin = headers.get("Origin")
        if origin is not None and not self._own(origin, host):
            raise AuthError("origin_refused",
                            "requests from that Origin are refused (list it in "
                            "configurations.a2a.allowed_origins)")

    def _serves(self, host: str) -> bool:
        name = host_name(host)
        if name in self.names:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def _own(self, origin: str, host: str | None) -> bool:
        origin = origin.lower().rstrip("/")
        if origin in self.allowed_origins:
            return True
        scheme, sep, authority = origin.partition("://")
        if not sep or host is None or scheme not in _DEFAULT_PORTS:
            return False
        return _authority(authority, scheme) == _authority(host.lower(), scheme)


def host_name(host: str) -> str:
    """The name or address of a ``Host`` header, without port or brackets, lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    name, sep, port = host.rpartition(":")
    return (name if sep and port.isdigit() else host).rstrip(".")


def _authority(authority: str, scheme: str) -> str:
    """``host[:port]`` with the scheme's default port left out, so both spellings match."""
    default = ":" + _DEFAULT_PORTS[scheme]
    return authority[:-len(default)] if authority.endswith(default) else authority
