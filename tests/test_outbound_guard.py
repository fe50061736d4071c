"""The one outbound guard (internal/http/_outbound_guard.py) and the session it guards.

The corpus of hostile URLs (tests/hostile_urls.py) is refused by the guard itself here;
tests/test_outbound_paths.py refuses it again on every path that calls out. Names resolve
through ``HostileNames`` (a hosts file for tests), handed to the guard as its resolver.
"""

from __future__ import annotations

import ipaddress

import aiohttp
import pytest
from aiohttp import web

from internal.http import (
    CONFIGURED,
    OutboundGuard,
    OutboundRules,
    embedded_ipv4,
    outbound_session,
)
from internal.protocol.a2a.model import ERROR_TABLE, OutboundRefused, RequestError
from tests.hostile_urls import HOSTILE, HostileNames, Listener, hostile_urls

PUSH = OutboundRules(private_key="configurations.a2a.push_notifications.allow_private_networks")


def guard(rules: OutboundRules = CONFIGURED, **names: list[str]) -> OutboundGuard:
    resolver = HostileNames(names)
    return OutboundGuard(rules, names=lambda: resolver)


def test_the_corpus_is_big_enough() -> None:
    assert len(HOSTILE) >= 40


async def test_every_hostile_url_is_refused_by_the_guard() -> None:
    lenient = guard()
    for url in hostile_urls(8081):
        with pytest.raises(OutboundRefused) as info:
            await lenient.check_url(url)
        assert isinstance(info.value, RequestError) and info.value.code == "outbound_refused"
        assert info.value.message.startswith("outbound call to "), url
        assert "pass" not in info.value.message and "etc/passwd" not in info.value.message


async def test_every_hostile_url_is_refused_by_the_session_before_any_connection() -> None:
    """Through the session alone (no client in front): the middleware judges the URL,
    the pinned resolver each address. Credentials are the client's to refuse: aiohttp
    moves them to a header before the session sees the URL (see the paths' tests)."""
    lenient = guard()
    async with Listener().running() as listener, outbound_session(lenient) as session:
        for url in hostile_urls(listener.port):
            if "@" in url:
                continue
            with pytest.raises((OutboundRefused, aiohttp.NonHttpUrlClientError,
                                aiohttp.InvalidUrlClientError)):
                async with session.get(url, allow_redirects=False):
                    pass
        assert listener.connections == 0


@pytest.mark.parametrize(("address", "rules", "refused"), [
    ("93.184.216.34", OutboundRules(), None),
    ("2606:2800:220:1:248:1893:25c8:1946", OutboundRules(), None),
    ("127.0.0.1", OutboundRules(), "loopback"),
    ("127.0.0.1", CONFIGURED, None),
    ("::1", OutboundRules(), "loopback"),
    ("::ffff:127.0.0.1", OutboundRules(), "loopback"),
    ("::ffff:127.0.0.1", CONFIGURED, None),
    ("10.1.2.3", OutboundRules(), "private"),
    ("10.1.2.3", OutboundRules(allow_private=True), None),
    ("172.16.0.1", OutboundRules(), "private"),
    ("192.168.1.5", OutboundRules(allow_private=True), None),
    ("100.64.0.1", OutboundRules(allow_private=True), None),  # CGNAT, Tailscale
    ("fd12::1", OutboundRules(allow_private=True), None),
    ("::ffff:10.0.0.1", OutboundRules(), "private"),
    ("100.100.100.200", CONFIGURED, "metadata"),
    ("fd00:ec2::254", CONFIGURED, "metadata"),
    ("192.0.0.192", CONFIGURED, "metadata"),
    ("169.254.170.2", CONFIGURED, "metadata"),
    ("169.254.1.1", CONFIGURED, "link-local"),
    ("fe80::1", CONFIGURED, "link-local"),
    ("0.0.0.0", CONFIGURED, "unspecified"),
    ("0.1.2.3", CONFIGURED, "unspecified"),
    ("::", CONFIGURED, "unspecified"),
    ("255.255.255.255", CONFIGURED, "reserved"),
    ("ff02::1", CONFIGURED, "multicast"),
    ("2002:a9fe:a9fe::", CONFIGURED, "169.254.169.254"),
    ("2002:5db8:d822::", OutboundRules(), None),  # 6to4 of a public address
    ("64:ff9b::a9fe:a9fe", CONFIGURED, "169.254.169.254"),
    ("::169.254.169.254", CONFIGURED, "169.254.169.254"),
])
def test_address_rules(address: str, rules: OutboundRules, refused: str | None) -> None:
    why = guard(rules).refusal(ipaddress.ip_address(address))
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why


def test_a_refusal_names_the_key_that_would_allow_it() -> None:
    why = guard(PUSH).refusal(ipaddress.ip_address("10.0.0.1"))
    assert why is not None
    assert "configurations.a2a.push_notifications.allow_private_networks" in why


def test_embedded_ipv4_forms() -> None:
    v4 = ipaddress.IPv4Address("169.254.169.254")
    for form in ("::ffff:169.254.169.254", "::169.254.169.254", "2002:a9fe:a9fe::1",
                 "64:ff9b::169.254.169.254"):
        assert embedded_ipv4(ipaddress.ip_address(form)) == v4, form
    assert embedded_ipv4(ipaddress.ip_address("::1")) is None
    assert embedded_ipv4(ipaddress.ip_address("2606:2800:220:1::1")) is None


@pytest.mark.parametrize("url", [
    "http://93.184.216.34/", "https://93.184.216.34:8443/a?b=c",
    "http://[2606:2800:220:1:248:1893:25c8:1946]/", "http://public.test/",
    "http://xn--bcher-kva.test/", "http://under_score.public.test:81/",
])
async def test_public_urls_pass(url: str) -> None:
    public = guard(OutboundRules(), **{
        "public.test": ["93.184.216.34"], "xn--bcher-kva.test": ["93.184.216.34"],
        "under_score.public.test": ["2606:2800:220:1:248:1893:25c8:1946"]})
    await public.check_url(url)


async def test_a_name_that_does_not_resolve_is_refused_when_stored() -> None:
    with pytest.raises(OutboundRefused, match="cannot resolve"):
        await guard().check_url("http://nowhere.test/")


async def test_the_connection_goes_only_to_the_address_that_was_judged() -> None:
    """DNS rebinding: a name that passed once and then resolves to metadata is refused
    when the next connection resolves it, through the same pinned resolver."""
    names = HostileNames({"flip.test": ["127.0.0.1"]})
    flip = OutboundGuard(CONFIGURED, names=lambda: names)
    async with Listener().running() as listener:
        url = f"http://flip.test:{listener.port}/"
        await flip.check_url(url)
        async with outbound_session(flip) as session, session.get(url) as resp:
            assert resp.status == 200
        assert listener.connections == 1
        names.names["flip.test"] = ("169.254.169.254",)
        async with outbound_session(flip) as session:
            with pytest.raises(OutboundRefused, match="metadata"):
                async with session.get(url):
                    pass
        assert listener.connections == 1
        assert names.asked.count("flip.test") == 3  # the check, and one per connection


async def test_a_redirect_to_metadata_is_an_answer_never_followed() -> None:
    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")

    app = web.Application()
    app.router.add_get("/", moved)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with outbound_session(guard()) as session:
            async with session.get(f"http://127.0.0.1:{port}/",
                                   allow_redirects=False) as resp:
                assert resp.status == 302
            # Even a caller that forgot allow_redirects=False: the guard judges each hop.
            with pytest.raises(OutboundRefused, match="metadata"):
                async with session.get(f"http://127.0.0.1:{port}/"):
                    pass
    finally:
        await runner.cleanup()


async def test_the_session_sends_only_what_butler_uses() -> None:
    seen: list[dict[str, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        resp = web.Response(text="{}")
        resp.set_cookie("tracker", "1")
        return resp

    app = web.Application()
    app.router.add_get("/", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with outbound_session(guard()) as session:
            for _ in range(2):
                async with session.get(f"http://127.0.0.1:{port}/",
                                       allow_redirects=False) as resp:
                    assert await resp.read() == b"{}"
    finally:
        await runner.cleanup()
    for headers in seen:
        names = {name.lower() for name in headers}
        assert "accept-encoding" not in names and "user-agent" not in names
        assert "cookie" not in names  # no cookie jar: the second request sends none


def test_the_refusal_is_in_the_one_table() -> None:
    spec = ERROR_TABLE["outbound_refused"]
    assert (spec.status, spec.rpc_code, spec.category) == (400, -32602, "request")
    assert ERROR_TABLE["peer_address_refused"].category == "delegation"
