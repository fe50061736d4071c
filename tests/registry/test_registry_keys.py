"""Key continuity in the registry: the identity key stays with the name; a change is
accepted only with the old key's signature over the new one (``butler key rotate``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from butler.identity.key_file import AgentIdentity, load_identity, rotate_identity
from butler.registry.clock import ManualClock
from butler.registry.service import build_registry_app
from butler.registry.store import RegistryStore
from tests.registry.registry_support import auth, config, make_card

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def client(aiohttp_client: Callable[[web.Application], Awaitable[Client]],
                 store: RegistryStore, clock: ManualClock) -> Client:
    return await aiohttp_client(build_registry_app(config(), store, clock))


async def register(client: Client, identity: AgentIdentity | None, **extra: Any) -> Any:
    card = {**make_card(), **(identity.v2_card_fields() if identity else {}), **extra}
    resp = await client.put("/v1/agents/office", json={"card": card}, headers=auth("alice"))
    return resp.status, await resp.json()


async def test_a_key_change_needs_the_old_keys_signature(client: Client,
                                                        tmp_path: Path) -> None:
    first = load_identity(tmp_path / "office")
    assert (await register(client, first))[0] == 201
    assert (await register(client, first))[0] == 200  # a refresh with the same key
    stranger = load_identity(tmp_path / "stranger")
    for identity in (stranger, None):
        status, body = await register(client, identity)
        assert status == 403 and body["error"]["code"] == "key_change_refused", body
    # Rotations that do not start at the registered key prove nothing.
    _, strangers_next = rotate_identity(tmp_path / "stranger")
    status, body = await register(client, strangers_next)
    assert status == 403 and body["error"]["code"] == "key_change_refused"
    _, rotated = rotate_identity(tmp_path / "office")
    status, body = await register(client, rotated)
    assert status == 200, body
    assert body["card"]["identity_key"] == rotated.key.public.jwk
    status, body = await register(client, first)  # and no way back
    assert status == 403 and body["error"]["code"] == "key_change_refused"
    status, body = await register(client, None, identity_key={"kty": "RSA"})
    assert status == 400


async def test_a_name_of_another_identity_is_name_owned_whatever_the_key(
    client: Client, tmp_path: Path
) -> None:
    # Issue 39: bob registering alice's "office" with a key of his own was answered
    # key_change_refused; the name being alice's is the reason.
    assert (await register(client, load_identity(tmp_path / "office")))[0] == 201
    card = {**make_card(), **load_identity(tmp_path / "bobs").v2_card_fields()}
    resp = await client.put("/v1/agents/office", json={"card": card}, headers=auth("bob"))
    assert resp.status == 403
    assert (await resp.json())["error"]["code"] == "name_owned"
