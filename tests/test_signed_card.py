"""Signed agent cards: the identity key in the data folder, the card's A2A 1.0 JWS
signature over its RFC 8785 form, checked by the official a2a-sdk and by Butler."""

from __future__ import annotations

import copy
import json
import stat
from decimal import Decimal
from typing import Any

import aiohttp
import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from jwt.api_jwk import PyJWK

from butler.identity.key_file import KEY_FILE, load_identity, rotate_identity
from internal.protocol.a2a.codec.card_signature import claimed_key, verify_card
from internal.signing import BadSignature, NotCanonical, canonical, jws_payload, rotated_to
from tests.support import ECHO, Swarm, run_cli

WELL_KNOWN = "/.well-known/agent-card.json"


async def fetch(http: aiohttp.ClientSession, url: str,
                headers: dict[str, str] | None = None) -> dict[str, Any]:
    async with http.get(url + WELL_KNOWN, headers=headers or {}) as resp:
        assert resp.status == 200
        body: dict[str, Any] = await resp.json()
        return body


def sdk_verifier(card_json: dict[str, Any]) -> Any:
    """The SDK's verifier, given the key the card's signature header carries."""
    header, _ = jws_payload(card_json["signatures"][0]["protected"] + "..")

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        assert kid == header["kid"]
        return PyJWK(header["jwk"], algorithm="EdDSA")

    return create_signature_verifier(key_provider, ["EdDSA"])


# --- RFC 8785 ----------------------------------------------------------------------


def test_canonical_json_matches_rfc_8785_examples() -> None:
    # RFC 8785 section 3.2.2 (sorting, escapes, numbers) and 3.2.3 (UTF-16 key order).
    raw = ('{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
           '"string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
           '"literals": [null, true, false]}')
    want = ('{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
            '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}')
    assert canonical(json.loads(raw)) == want.encode()
    assert canonical(json.loads(raw, parse_float=Decimal)) == want.encode()
    keys = {"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet "
            "With Dagesh", "1": "One", "\U0001f600": "Emoji: Grinning Face",
            "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}
    order = [k for k in json.loads(canonical(keys))]
    assert order == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    for bad in (float("nan"), 2**53, {1: "x"}, "\ud800"):
        with pytest.raises(NotCanonical):
            canonical(bad)


@pytest.mark.parametrize(("bits", "text"), [
    (0x0000000000000001, "5e-324"), (0x7fefffffffffffff, "1.7976931348623157e+308"),
    (0x4340000000000000, "9007199254740992"), (0x4430000000000000, "295147905179352830000"),
    (0x44b52d02c7e14af5, "9.999999999999997e+22"), (0x44b52d02c7e14af6, "1e+23"),
    (0x444b1ae4d6e2ef50, "1e+21"), (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
    (0x3eb0c6f7a0b5ed8d, "0.000001"), (0x41b3de4355555557, "333333333.33333343"),
    (0xbecbf647612f3696, "-0.0000033333333333333333"), (0x43143ff3c1cb0959, "1424953923781206.2"),
])
def test_numbers_are_written_as_rfc_8785_appendix_b_says(bits: int, text: str) -> None:
    import struct

    from internal.signing._canonical import number

    assert number(struct.unpack(">d", bits.to_bytes(8, "big"))[0]) == text


# --- the key and the card ----------------------------------------------------------


async def test_the_card_is_signed_by_a_private_key_the_official_sdk_verifies(
    swarm: Swarm, http: aiohttp.ClientSession,
) -> None:
    home = await swarm.start("home", skills=[{**ECHO, "description": "says it back ✓"}])
    key_file = home.daemon.config.data_dir / KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    for headers in ({}, {"A2A-Version": "1.0"}):  # with and without the 0.3 fields
        card_json = await fetch(http, home.url, headers)
        assert verify_card(card_json).kid == home.daemon.identity.kid
        assert claimed_key(card_json) == home.daemon.identity.key.public
        sdk_verifier(card_json)(parse_agent_card(copy.deepcopy(card_json)))
        # One byte changed anywhere the signature covers: neither accepts it.
        edited = {**card_json, "description": card_json["description"] + "!"}
        with pytest.raises(InvalidSignaturesError):
            sdk_verifier(card_json)(parse_agent_card(copy.deepcopy(edited)))
        with pytest.raises(BadSignature):
            verify_card(edited)
    # The same key after a restart.
    kid = home.daemon.identity.kid
    await swarm.stop(home)
    assert load_identity(home.daemon.config.data_dir).kid == kid


def test_a_rotated_key_is_signed_by_the_old_one(tmp_path: Any) -> None:
    first = load_identity(tmp_path)
    old, second = rotate_identity(tmp_path)
    _, third = rotate_identity(tmp_path)
    assert old.kid == first.kid and len({first.kid, second.kid, third.kid}) == 3
    assert load_identity(tmp_path).kid == third.kid
    assert rotated_to(first.key.public, third.kid, third.rotations)
    assert rotated_to(second.key.public, third.kid, third.rotations)
    # Nobody else's key leads there, and no chain runs backwards.
    stranger = load_identity(tmp_path / "other")
    assert not rotated_to(stranger.key.public, third.kid, third.rotations)
    assert not rotated_to(third.key.public, first.kid, third.rotations)


async def test_butler_card_says_when_a_card_was_edited(swarm: Swarm,
                                                      http: aiohttp.ClientSession) -> None:
    from tests.test_card_cli import card_server

    home = await swarm.start("home")
    card_json = await fetch(http, home.url)
    edited = {**card_json, "name": "someone else"}
    async with card_server(edited) as url:
        code, out, err = await run_cli("card", url)
    assert code == 0, err
    assert out.splitlines()[-1].startswith("  signature: INVALID (the card's signature does "
                                           "not check"), out


async def test_key_rotate_on_a_stopped_daemon(swarm: Swarm, http: aiohttp.ClientSession) -> None:
    home = await swarm.start("home")
    old_kid = home.daemon.identity.kid
    code, _, err = await run_cli("key", "rotate", "-c", str(home.config_path))
    assert code == 2 and "data_folder_in_use" in err  # not while it runs
    await swarm.stop(home)
    code, out, err = await run_cli("key", "rotate", "-c", str(home.config_path))
    assert code == 0 and old_kid in out, err
    code, out, err = await run_cli("key", "show", "-c", str(home.config_path))
    assert code == 0 and "rotations: 1" in out, err
    again = await swarm.start("home")
    card_json = await fetch(http, again.url)
    new = verify_card(card_json)
    assert new.kid != old_kid and new.kid in out
    from internal.protocol.a2a.codec.card_signature import key_rotations

    assert rotated_to(home.daemon.identity.key.public, new.kid, key_rotations(card_json))


def test_the_fast_path_writes_the_same_bytes_as_the_careful_one() -> None:
    from internal.signing._canonical import _write

    def careful(value: Any) -> bytes:
        out: list[str] = []
        _write(value, out, 0)
        return "".join(out).encode()

    values: list[Any] = [
        {"b": [1, "x", None, True, False], "a": {"\u00e9": "\u20ac\n\t\x01\x7f\"\\/"}},
        {"\ufb33": 1, "\r": 2, "1": 3, "\u00f6": [], "z": {}}, [], "", 2**53 - 1,
        {"k": ["\u2028\u2029", "\U0001f600"]},
        # Past the fast path's reach, deep inside: an astral key, a float, a Decimal.
        {"a": [{"z": 1, "\U0001f600": 2, "\ufb33": 3}]}, [[0.5]], {"a": {"b": Decimal("1.5")}},
    ]
    for value in values:
        assert canonical(value) == careful(value), value
    too_deep: Any = "x"
    for _ in range(130):
        too_deep = [{"k": too_deep}]
    for bad in ({"k": "\ud83d"}, {"k": [2**53]}, {"\U0001f600": 1, "\ufb33": 2}, too_deep,
                {1: "not a string key"}):
        try:
            expected: Any = careful(bad)
        except NotCanonical:
            expected = NotCanonical
        if expected is NotCanonical:
            with pytest.raises(NotCanonical):
                canonical(bad)
        else:
            assert canonical(bad) == expected


async def test_hostile_cards_and_receipts_are_bad_signatures_not_crashes(swarm: Swarm) -> None:
    """What a peer sends is checked for shape at every level: wrong JSON types and
    non-ASCII where base64url belongs are ``BadSignature``, never a TypeError or a
    UnicodeEncodeError out of the delegation."""
    from butler.identity.key_file import load_identity as identity_of
    from internal.protocol.a2a.codec.card_signature import key_rotations
    from internal.signing import verify_jws

    home = await swarm.start("home", skills=[ECHO])
    async with home.session.get(f"{home.url}/.well-known/agent-card.json") as resp:
        card = await resp.json()
    for extensions in (5, "x", [5], [{"uri": 5}], None):
        bent = copy.deepcopy(card)
        bent["capabilities"]["extensions"] = extensions
        assert key_rotations(bent) == ()
        assert claimed_key(bent) is None
        with pytest.raises(BadSignature):
            verify_card(bent)  # no longer the card that was signed: said so, no TypeError
    key = identity_of(home.daemon.config.data_dir).key.public
    protected, _, signature = card["signatures"][0]["protected"], "", "x"
    for jws in (f"{protected}.\u00e9t\u00e9.{signature}", "a.b", f"{protected}.e30.\u00e9"):
        with pytest.raises(BadSignature):
            verify_jws(jws, key)


@pytest.mark.parametrize("text", ['{"key": 5}', "[1, 2]", '{"key": {"kty": 5}}', "not json",
                                  '{"key": {"kty": "OKP"}, "rotations": 7}'])
def test_a_damaged_key_file_is_a_setup_error(tmp_path: Any, text: str) -> None:
    """Start-up says what is wrong with the file and what to do; no traceback."""
    from butler.identity.key_file import read_identity
    from internal.protocol.a2a.model import SetupError

    (tmp_path / KEY_FILE).write_text(text)
    with pytest.raises(SetupError) as err:
        read_identity(tmp_path)
    assert err.value.code == "bad_identity_key"
